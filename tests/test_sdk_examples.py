"""The manual's client SDK example (docs/manual/sdk.md) and examples/order_consumer_service.py, run
as a user runs them (their own Python processes) against a whole broker in this test process."""

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
from tests.broker_server.in_process_broker import InProcessBroker, running_broker

SDK_PAGE = Path(__file__).resolve().parents[1] / "docs" / "manual" / "sdk.md"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    with running_broker(tmp_path_factory.mktemp("sdk-examples"), flush="sync") as server:
        with RmqClient(server.address) as client:
            client.create_topic("orders", 4)        # the manual's topic
            client.create_topic("orders-svc", 4)    # the example service's, in its own test
        yield server


def sdk_example() -> str:
    section = SDK_PAGE.read_text().split("## Client SDK", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_sdk_page_example_runs(broker: InProcessBroker) -> None:
    code = sdk_example().replace("127.0.0.1:10911", broker.address)
    assert len(code.strip().splitlines()) <= 11
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "SendResult(msg_id=" in run.stdout and "[b'hello']" in run.stdout


def order_service(broker: InProcessBroker, *args: str) -> subprocess.CompletedProcess[str]:
    """examples/order_consumer_service.py run as a user runs it, against `broker`."""
    command = [sys.executable, "-m", "examples.order_consumer_service", "--endpoints", broker.address, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def test_order_consumer_service_totals(broker: InProcessBroker) -> None:
    events = list(order_events(200, start_ms=0))
    with Producer(broker.address) as producer:
        producer.send([Message("orders-svc", e.body(), tags=e.status, keys=e.order_id) for e in events])
    run = order_service(broker, "--topic", "orders-svc", "--max-messages", "200")
    assert run.returncode == 0, run.stderr
    counts = Counter(e.status for e in events)
    for status, count in counts.items():
        assert (
            f"{status}: {count} orders, {sum(e.amount for e in events if e.status == status):.2f}"
            in run.stdout
        )
    assert "consumed 200 orders" in run.stdout


def test_order_consumer_service_unknown_topic_is_one_line(broker: InProcessBroker) -> None:
    run = order_service(broker, "--topic", "nope")
    assert run.returncode == 2
    assert run.stderr.startswith("order service: cannot start: TOPIC_NOT_EXIST")
    assert "Traceback" not in run.stderr
