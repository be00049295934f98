"""Scenario 8 (user side): bad CLI arguments and bad connector options. Each gets one clear
error naming what is wrong — for the CLI one `rmq: error:` line on stderr (a broker that got
as far as starting may have logged before it), a non-zero exit and no traceback; for the
Spark source an RmqOptionError at load() naming the option. The inputs and messages form
the bad-input table of RELIABILITY.md."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration_tests.reliability.report import ReliabilityReport
from testing import processes

pytestmark = pytest.mark.integration

CLI_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def live_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[processes.ServerProcess]:
    server = processes.broker(tmp_path_factory.mktemp("bad-arguments"))
    server.start()
    yield server
    server.stop()


def _cli_cases(tmp: Path, broker: str) -> list[list[str]]:
    a_file = tmp / "a-file"
    a_file.write_text("not a directory")
    foreign = tmp / "foreign"
    foreign.mkdir(exist_ok=True)
    (foreign / "photos.txt").write_text("holiday")
    unknown_key = tmp / "unknown-key.yaml"
    unknown_key.write_text("listen: 127.0.0.1:1\nflush_speed: 3\n")
    bad_yaml = tmp / "bad.yaml"
    bad_yaml.write_text("listen: [unclosed\n")
    free = f"127.0.0.1:{processes.free_port()}"
    return [
        ["frobnicate"],
        ["broker", "--listen", "nonsense"],
        ["broker", "--listen", "127.0.0.1:99999"],
        ["broker", "--flush", "sometimes"],
        ["broker", "--listen", free, "--config", str(tmp / "missing.yaml")],
        ["broker", "--listen", free, "--config", str(unknown_key)],
        ["broker", "--listen", free, "--config", str(bad_yaml)],
        ["broker", "--listen", free, "--store-dir", str(a_file)],
        ["broker", "--listen", free, "--store-dir", str(foreign)],
        ["broker", "--listen", broker, "--store-dir", str(tmp / "second")],
        ["topic", "create", "t"],
        ["topic", "create", "t", "--queues", "0"],
        ["topic", "create", "bad topic!", "--queues", "2", "--endpoints", broker],
        ["topic", "describe", "no-such-topic", "--endpoints", broker],
        ["produce", "no-such-topic", "--count", "1", "--endpoints", broker],
        ["produce", "t", "--count", "-3"],
        ["consume", "t", "--from", "yesterday"],
        ["group", "progress"],
        ["topic", "list", "--endpoints", "not an address"],
        ["topic", "list", "--endpoints", f"127.0.0.1:{processes.free_port()}"],
    ]


def test_bad_cli_arguments_get_one_clear_line(tmp_path: Path, live_broker, report: ReliabilityReport) -> None:
    cases = _cli_cases(tmp_path, live_broker.address)
    running = [subprocess.Popen(processes.RMQ + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True) for args in cases]
    problems = []
    for args, process in zip(cases, running, strict=True):
        try:
            _, stderr = process.communicate(timeout=CLI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            problems.append(f"rmq {' '.join(args)}: still running after {CLI_TIMEOUT_S}s")
            continue
        errors = [line for line in stderr.splitlines() if line.startswith("rmq: error:")]
        shown = _shown(errors[0] if errors else stderr, tmp_path, live_broker.address)
        report.record_bad_input("CLI", "rmq " + _shown(" ".join(args), tmp_path, live_broker.address), shown)
        if process.returncode == 0 or "Traceback" in stderr or len(errors) != 1:
            problems.append(f"rmq {' '.join(args)}: exit {process.returncode}, stderr {stderr!r:.500}")
    assert problems == []
    assert live_broker.process.poll() is None


def _shown(text: str, tmp_path: Path, broker: str) -> str:
    text = text.strip().replace(str(tmp_path), "$TMP").replace(broker, "$BROKER")
    return re.sub(r"127\.0\.0\.1:(?!99999)\d+", "127.0.0.1:$PORT", text)


OPTION_CASES: list[tuple[str, dict[str, str], str]] = [
    # (description, options on top of endpoints + topic, option the error must name)
    ("no endpoints", {"endpoints": None}, "endpoints"),
    ("no topic", {"topic": None}, "topic"),
    ("endpoints not host:port", {"endpoints": "localhost"}, "endpoints"),
    ("topic with a space", {"topic": "bad topic"}, "topic"),
    ("startingOffsets=yesterday", {"startingOffsets": "yesterday"}, "startingOffsets"),
    ("startingOffsets=timestamp:soon", {"startingOffsets": "timestamp:soon"}, "startingOffsets"),
    ("startingOffsets bad JSON", {"startingOffsets": '{"t": {"broker-a": {"0": "x"}}}'}, "startingOffsets"),
    ("endingOffsets=earliest", {"endingOffsets": "earliest"}, "endingOffsets"),
    ("pullBatchSize=0", {"pullBatchSize": "0"}, "pullBatchSize"),
    ("pullTimeoutMs=soon", {"pullTimeoutMs": "soon"}, "pullTimeoutMs"),
    ("allocateStrategy=random", {"allocateStrategy": "random"}, "allocateStrategy"),
    ("messageModel=p2p", {"messageModel": "p2p"}, "messageModel"),
    ("failOnDataLoss=maybe", {"failOnDataLoss": "maybe"}, "failOnDataLoss"),
    ("subExpression=TagA ||", {"subExpression": "TagA ||"}, "subExpression"),
    ("maxMessagesPerTrigger on a batch read", {"maxMessagesPerTrigger": "10"}, "maxMessagesPerTrigger"),
    ("unknown option pullBachSize", {"pullBachSize": "10"}, "pullBachSize"),
]


@pytest.mark.spark
def test_bad_connector_options_fail_at_load_naming_the_option(spark, live_broker,
                                                              report: ReliabilityReport) -> None:
    problems = []
    for description, extra, option in OPTION_CASES:
        options = {"endpoints": live_broker.address, "topic": "t", **extra}
        reader = spark.read.format("rmq")
        for name, value in options.items():
            if value is not None:
                reader = reader.option(name, value)
        try:
            reader.load().limit(1).collect()
        except Exception as error:  # noqa: BLE001 - Spark wraps the source's error in its own types
            message = _source_error(str(error))
            report.record_bad_input("connector option", description,
                                    message.replace(live_broker.address, "$BROKER"))
            if option.lower() not in message.lower():
                problems.append(f"{description}: error does not name {option}: {message}")
        else:
            problems.append(f"{description}: accepted")
    assert problems == []


def _source_error(text: str) -> str:
    """The connector's own error line inside Spark's wrapped exception text."""
    match = re.search(r"(Rmq\w*Error): (.+)", text)
    return f"{match.group(1)}: {match.group(2).strip()}" if match else text.strip().splitlines()[0]
