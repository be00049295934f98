"""Helpers for driving the official RocketMQ 5 Python client (`rocketmq-python-client`) against
rmq brokers (in this process or real processes): start-up and shutdown bounded in time (the
client runs background threads and can hang on shutdown when a server misbehaves, spec
rocketmq-v2-protocol.md §3), messages built in one call, polling loops with a deadline, the
broker settings its tests share and a topic of each test's own."""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

from rmq.connector.client import MessageQueue, RmqClient
from rmq.connector.spark.message_decoder import decode

rocketmq = pytest.importorskip("rocketmq")
from rocketmq.grpc_protocol import FilterType  # noqa: E402, F401  (after the skip; re-exported)
from rocketmq.v5.exception.client_exception import ForbiddenException  # noqa: E402, F401  (after the skip; re-exported)

T = TypeVar("T")
CLIENT_CALL_TIMEOUT_S = 20.0

# The broker of these tests (each test has its own topic and groups): retries 1 s apart, the DLQ
# after 3 deliveries, group g-fifo consuming in order, open transactions checked back after 1 s,
# receives may ask for an invisibility of 2 s (not 10 s: an expired invisibility is waited out).
MIN_INVISIBLE_S = 2
BROKER_SETTINGS = {
    "message_delay_level": " ".join(["1s"] * 18), "retry_max_times": 2, "fifo_consumer_groups": "g-fifo",
    "transaction_timeout_ms": 1000, "transaction_check_interval_ms": 1000,
    "min_invisible_ms": MIN_INVISIBLE_S * 1000,
}
FORGOTTEN_S = 6   # the invisibility of a delivery never acknowledged: it comes back after it


def topic_of_the_test(address: str, request: pytest.FixtureRequest) -> str:
    """A topic with 4 queues of the test's own, named after it."""
    readable = "".join(c if c.isalnum() else "-" for c in request.node.name.removeprefix("test_"))[:40]
    name = f"{readable}-{zlib.crc32(request.node.name.encode()):08x}"
    with RmqClient(address) as client:
        client.create_topic(name, queues=4)
    return name


def bounded(call: Callable[[], T], timeout: float = CLIENT_CALL_TIMEOUT_S, what: str = "") -> T:
    """Run `call` on a daemon thread; fail the test when it does not return in `timeout`."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call()
        except BaseException as error:  # re-raised on the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"official client call {what or call} did not return within {timeout} s (hang)")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def configuration(address: str, access_key: str = "", secret_key: str = "") -> Any:
    return rocketmq.ClientConfiguration(address, rocketmq.Credentials(access_key, secret_key))


@contextmanager
def started(client: Any) -> Iterator[Any]:
    """startup() then, whatever happens, shutdown() — both bounded in time."""
    bounded(client.startup, what=f"{type(client).__name__}.startup")
    try:
        yield client
    finally:
        bounded(client.shutdown, what=f"{type(client).__name__}.shutdown")


def message(topic: str, body: bytes, tag: str = "", keys: tuple[str, ...] = (),
            properties: dict[str, str] | None = None, group: str = "",
            delivery_timestamp: int = 0) -> Any:
    built = rocketmq.Message()
    built.topic = topic
    built.body = body
    if tag:
        built.tag = tag
    for key in keys:   # the client's setter adds one key per assignment
        built.keys = key
    for name, value in (properties or {}).items():
        built.add_property(name, value)
    if group:
        built.message_group = group
    if delivery_timestamp:
        built.delivery_timestamp = delivery_timestamp
    return built


def receive_until(consumer: Any, count: int, invisible_s: int = 20, timeout: float = 30.0,
                  ack: bool = True) -> list[Any]:
    """Receive (and ack) until `count` messages arrived or `timeout` passed."""
    received: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(received) < count and time.monotonic() < deadline:
        batch = bounded(lambda: consumer.receive(32, invisible_s), what="receive")
        for item in batch:
            if ack:
                bounded(lambda item=item: consumer.ack(item), what="ack")
        received += batch
    return received


def wait_for(condition: Callable[[], bool], timeout: float = 30.0, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


def simple_consumer(address: str, topic: str, group: str, expression: str = "*", await_s: int = 2):
    return rocketmq.SimpleConsumer(configuration(address), group,
                                   {topic: rocketmq.FilterExpression(expression)}, await_duration=await_s)


def send_all(address: str, messages: list) -> list:
    with started(rocketmq.Producer(configuration(address), tuple({m.topic for m in messages}))) as producer:
        return [bounded(lambda m=m: producer.send(m), what="send") for m in messages]


def pulled(address: str, topic: str, account: tuple[str, str] | None = None) -> list[dict]:
    """Every message of `topic` through rmq.v1 PullMessage, decoded as the Spark source does."""
    rows = []
    access_key, secret_key = account or (None, None)
    with RmqClient(address, access_key=access_key, secret_key=secret_key) as client:
        for queue_id in range(4):
            result = client.pull(MessageQueue(topic, "broker-a", queue_id), 0, 100, group="v1-reader")
            rows += decode(result.messages, "broker-a").to_pylist()
    return rows
