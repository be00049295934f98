"""ScheduleMessageService on a real store (spec consumer-pull-rebalance §19, TV-16):
a batch whose head is due and whose tail is not delivers the head only and waits exactly until
the tail is due; a delayed message whose topic was deleted is dropped and passed; a failed
re-put is retried later from the same offset, nothing lost or delivered twice."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import numpy as np

from rmq.broker_server.processors.names import SCHEDULE_TOPIC
from rmq.broker_server.processors.schedule_message_service import (
    DELAY_FOR_A_PERIOD_MS,
    ScheduleMessageService,
)
from rmq.broker_server.processors.topic_config_manager import TopicConfig
from rmq.stored_message import decode_records
from rmq.v1 import rmq_pb2
from tests.broker_server import test_processors
from tests.broker_server.store_fixture import wait_dispatched
from tests.broker_server.test_processors import Broker, pull, send

broker = test_processors.broker     # the processors wired on a real store, topic "T" with 4 queues

LEVEL = 3
DELAY_MS = 10_000
LEVEL_QUEUE = LEVEL - 1          # level N waits in SCHEDULE_TOPIC queue N-1


class Clock:
    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def schedule_service(broker: Broker, tmp_path: Path) -> tuple[ScheduleMessageService, Clock]:
    clock = Clock()
    return ScheduleMessageService(broker.store, broker.topics, broker.executor, tmp_path,
                                  {LEVEL: DELAY_MS}, clock=clock), clock


def park(broker: Broker, *bodies: bytes, queue_id: int = 3) -> list[int]:
    """Send delayed messages (level 3) one by one, 20 ms apart; returns their store timestamps."""
    for body in bodies:
        assert send(broker, rmq_pb2.Message(body=body, queue_id=queue_id, delay_level=LEVEL)).status.code == 0
        time.sleep(0.02)   # not an event: the store stamps with the real clock, 20 ms apart
    wait_dispatched(broker.store, SCHEDULE_TOPIC, LEVEL_QUEUE, len(bodies))
    parked = broker.store.get_message("G", SCHEDULE_TOPIC, LEVEL_QUEUE, 0, 32)
    return [m.store_timestamp for m in decode_records(parked.buffer, parked.sizes)]


def delivered_bodies(broker: Broker, queue_id: int = 3) -> list[bytes]:
    response = pull(broker, queue_id, 0)
    if response.pull_status != rmq_pb2.FOUND:
        return []
    return [m.body for m in decode_records(response.messages.records,
                                           np.frombuffer(response.messages.sizes, "<i4"))]


def test_tv16_partly_due_batch_delivers_the_due_head_and_waits_for_the_tail(
        broker: Broker, tmp_path: Path) -> None:
    service, clock = schedule_service(broker, tmp_path)
    first, second = park(broker, b"due", b"not-yet")
    clock.now_s = (first + DELAY_MS) / 1000                      # entry 0 due, entry 1 not
    wait_ms = asyncio.run(service.deliver_due(LEVEL))
    assert wait_ms == second - first                             # exactly until entry 1 is due
    assert service.offsets[LEVEL] == 1
    wait_dispatched(broker.store, "T", 3, 1)
    assert delivered_bodies(broker) == [b"due"]
    clock.now_s = (second + DELAY_MS) / 1000
    assert asyncio.run(service.deliver_due(LEVEL)) == 0
    assert service.offsets[LEVEL] == 2
    wait_dispatched(broker.store, "T", 3, 2)
    assert delivered_bodies(broker) == [b"due", b"not-yet"]


def test_delayed_message_of_a_deleted_topic_is_dropped_and_passed(broker: Broker, tmp_path: Path) -> None:
    broker.topics.create(TopicConfig("Gone", 4, 4))
    service, clock = schedule_service(broker, tmp_path)
    assert send(broker, rmq_pb2.Message(body=b"orphan", queue_id=0, delay_level=LEVEL),
                topic="Gone").status.code == 0
    *_, stored = park(broker, b"kept")                     # a later message for topic T
    broker.topics.delete("Gone")
    clock.now_s = (stored + DELAY_MS) / 1000
    assert asyncio.run(service.deliver_due(LEVEL)) == 0
    assert service.offsets[LEVEL] == 2                     # the orphan is passed, not retried forever
    wait_dispatched(broker.store, "T", 3, 1)
    assert delivered_bodies(broker) == [b"kept"]
    assert broker.store.get_max_offset_in_queue("Gone", 0) == 0


def test_failed_delivery_is_retried_later_from_the_same_offset(broker: Broker, tmp_path: Path) -> None:
    service, clock = schedule_service(broker, tmp_path)
    [stored] = park(broker, b"retried")
    clock.now_s = (stored + DELAY_MS) / 1000
    store = broker.store
    warning = store.config.disk_space_warning_level_ratio
    store.config.disk_space_warning_level_ratio = 0.0      # any disk use is "full": not writeable
    try:
        store.clean_expired_files()
        assert not store.is_writeable()
        assert asyncio.run(service.deliver_due(LEVEL)) == DELAY_FOR_A_PERIOD_MS
        assert service.offsets.get(LEVEL, 0) == 0
    finally:
        store.config.disk_space_warning_level_ratio = warning
    store.clean_expired_files()
    assert store.is_writeable()
    assert asyncio.run(service.deliver_due(LEVEL)) == 0
    assert service.offsets[LEVEL] == 1
    wait_dispatched(store, "T", 3, 1)
    assert delivered_bodies(broker) == [b"retried"]
    assert asyncio.run(service.deliver_due(LEVEL)) is None
