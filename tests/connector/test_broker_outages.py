"""A consumer names an unreachable broker in one warning per outage (again after the repeat
period while it lasts), logs its return once, and leaves other failures to the caller."""

from __future__ import annotations

import logging

import pytest

from rmq.connector.broker_outages import BrokerOutages
from rmq.connector.errors import RmqError, RmqUnavailable
from rmq.v1 import rmq_pb2


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_one_warning_per_outage_then_one_line_when_it_answers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="rmq.connector.broker_outages")
    clock = Clock()
    outages = BrokerOutages("consumer group g", repeat_warning_s=60, clock=clock)
    down = RmqUnavailable("PullMessage failed: UNAVAILABLE", broker="broker-a at 127.0.0.1:1")
    for _ in range(20):               # a pull every 3 s on each of its queues
        outages.unreachable("broker-a", down)
        clock.now += 2.9
    outages.answered("broker-b")      # another broker answering ends nothing
    assert len(messages(caplog, logging.WARNING)) == 1
    assert messages(caplog, logging.WARNING)[0].startswith(
        "consumer group g: broker broker-a is unreachable, its queues wait until it answers")
    clock.now += 2.1                  # 60 s after the first warning: reminded once
    outages.unreachable("broker-a", down)
    assert len(messages(caplog, logging.WARNING)) == 2
    assert len(messages(caplog, logging.DEBUG)) == 19

    outages.answered("broker-a")
    outages.answered("broker-a")
    assert messages(caplog, logging.INFO) == ["consumer group g: broker broker-a answers again"]
    outages.unreachable("broker-a", down)    # a new outage warns at once
    assert len(messages(caplog, logging.WARNING)) == 3


def test_only_unreachable_brokers_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    outages = BrokerOutages("consumer group g")
    refused = RmqError(rmq_pb2.NO_PERMISSION, "no permission", broker="broker-a")
    assert not outages.report("broker-a", refused)
    assert not outages.report("broker-a", None)
    assert outages.report("broker-a", RmqUnavailable("down", broker="broker-a"))
    outages.unreachable_all({"broker-b": RmqUnavailable("down", broker="broker-b")})
    assert [r.getMessage().split(",")[0] for r in caplog.records] == [
        f"consumer group g: broker {name} is unreachable" for name in ("broker-a", "broker-b")]
