"""Helpers for driving the official RocketMQ 5 Python client (`rocketmq-python-client`) against
real rmq brokers: start-up and shutdown bounded in time (the client runs background threads and
can hang on shutdown when a server misbehaves, spec rocketmq-v2-protocol.md §3), messages
built in one call, and polling loops with a deadline."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import pytest

rocketmq = pytest.importorskip("rocketmq")
from rocketmq.grpc_protocol import FilterType  # noqa: E402, F401  (after the skip; re-exported)
from rocketmq.v5.exception.client_exception import ForbiddenException  # noqa: E402, F401  (after the skip; re-exported)

T = TypeVar("T")
CLIENT_CALL_TIMEOUT_S = 20.0


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
