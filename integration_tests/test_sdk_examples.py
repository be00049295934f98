"""The manual's client SDK example (docs/manual/sdk.md) and examples/order_consumer_service.py,
run against a real broker."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples.orders import order_events
from rmq.connector import Message, Producer
from rmq.connector.client import RmqClient
from testing import processes

SDK_PAGE = Path(__file__).resolve().parents[1] / "docs" / "manual" / "sdk.md"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[processes.ServerProcess]:
    server = processes.broker(tmp_path_factory.mktemp("sdk-examples")).start()
    with RmqClient(server.address) as client:
        client.create_topic("orders", 4)        # the manual's topic
        client.create_topic("orders-svc", 4)    # the example service's, in its own test
    yield server
    server.stop()


def sdk_example() -> str:
    section = SDK_PAGE.read_text().split("## Client SDK", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_sdk_page_example_runs(broker: processes.ServerProcess) -> None:
    code = sdk_example().replace("127.0.0.1:10911", broker.address)
    assert len(code.strip().splitlines()) <= 11
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "SendResult(msg_id=" in run.stdout and "[b'hello']" in run.stdout


def test_order_consumer_service_totals(broker: processes.ServerProcess) -> None:
    events = list(order_events(200, start_ms=0))
    with Producer(broker.address) as producer:
        producer.send([Message("orders-svc", e.body(), tags=e.status, keys=e.order_id) for e in events])
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.order_consumer_service",
            "--endpoints",
            broker.address,
            "--topic",
            "orders-svc",
            "--max-messages",
            "200",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    counts = Counter(e.status for e in events)
    for status, count in counts.items():
        assert (
            f"{status}: {count} orders, {sum(e.amount for e in events if e.status == status):.2f}"
            in run.stdout
        )
    assert "consumed 200 orders" in run.stdout


def test_order_consumer_service_unknown_topic_is_one_line(broker: processes.ServerProcess) -> None:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.order_consumer_service",
            "--endpoints",
            broker.address,
            "--topic",
            "nope",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert run.stderr.startswith("order service: cannot start: TOPIC_NOT_EXIST")
    assert "Traceback" not in run.stderr
