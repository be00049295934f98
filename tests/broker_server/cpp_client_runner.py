"""Runs a scenario of the official RocketMQ 4.x C++ client (remoting_cpp_client.py) in its own
process, and says why it cannot run on this machine (skip reason)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).with_name("remoting_cpp_client.py")
CLIENT_TIMEOUT_S = 120


@functools.cache
def cpp_client_problem() -> str | None:
    """Why the C++ client cannot run here, or None (its library loads in a separate process)."""
    try:
        loaded = subprocess.run(
            [sys.executable, "-c", "import rocketmq.client"], capture_output=True, text=True, timeout=60
        )
    except subprocess.TimeoutExpired:
        return "importing rocketmq.client timed out"
    if loaded.returncode:
        return (
            f"the RocketMQ 4.x C++ client (PyPI rocketmq 0.4.4) does not load: {loaded.stderr.strip()[-300:]}"
        )
    return None


def run_client(**scenario: object) -> dict:
    """The scenario's JSON result (remoting_cpp_client.py documents the scenarios)."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), json.dumps(scenario)],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
