"""`make demo` (`python -m examples.demo`) as a user runs it: to completion with lag 0, and
interrupted with Ctrl-C; either way nothing it started is left behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parent.parent
DEMO = [sys.executable, "-m", "examples.demo"]


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def assert_cleaned_up(output: str) -> None:
    broker_pid = int(re.search(r"broker ready at \S+ \(pid (\d+)", output).group(1))
    store = re.search(r"temporary store (\S+) removed", output).group(1)
    assert "broker stopped (exit code 0)" in output
    assert not is_running(broker_pid)
    assert not Path(store).exists()


def test_demo_consumes_everything_and_reports_lag_0():
    result = subprocess.run(DEMO, cwd=ROOT, capture_output=True, text=True, timeout=600)
    output = result.stdout
    assert result.returncode == 0, output + result.stderr
    assert "produced 20,000 / 20,000 messages" in output
    assert re.search(r"micro-batch \d+: [\d,]+ messages", output)
    assert re.search(r"total +20,000 +\(matches the 20,000 produced\)", output)
    queue_lines = re.findall(r"^\S+ +([0-7]) +[\d,]+ +[\d,]+ +0$", output, re.MULTILINE)
    assert sorted(queue_lines) == [str(q) for q in range(8)]   # 8 queues, each with lag 0
    assert "total lag 0" in output
    assert "Spark stopped" in output
    assert_cleaned_up(output)


def test_ctrl_c_during_the_query_stops_spark_and_the_broker_and_removes_the_store():
    demo = subprocess.Popen(DEMO, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    lines = []
    try:
        for line in demo.stdout:
            lines.append(line)
            if "query started" in line:
                demo.send_signal(signal.SIGINT)
                break
        lines += demo.stdout.readlines()
        assert demo.wait(120) == 130, "".join(lines)
    finally:
        if demo.poll() is None:
            demo.kill()
    output = "".join(lines)
    assert "interrupted: everything the demo started has been stopped" in output
    assert "Spark stopped" in output
    assert_cleaned_up(output)
