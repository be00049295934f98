"""A queue a consumer stops reading (it moved to another member of the group) takes its held
long-polling pull with it: the broker's hold table keeps only the pulls of queues someone reads
(an in-process broker, so the table can be seen). Without this, every rebalance left the moved
queues' pulls held until their suspend time ran out, and a group of many members starting in
one process filled its connection's streams (bench section 14, bench/NOTES.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.broker_server.long_polling.pull_request_hold_service import HeldPullRequest, build_key
from rmq.connector import push_consumer as push_consumer_module
from rmq.connector.client import MessageQueue, RmqClient
from rmq.connector.message_listener import ConsumeConcurrentlyStatus
from rmq.connector.push_consumer import PushConsumer
from tests.broker_server.in_process_broker import InProcessBroker
from tests.waiting import wait_until

TOPIC = "moving"
GROUP = "moving-group"
QUEUES = 4
HELD_FOR_MS = 600_000   # far longer than the test's waits: a pull left behind stays visible


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    broker = InProcessBroker(tmp_path / "store").start()
    try:
        with RmqClient(broker.address) as client:
            client.create_topic(TOPIC, queues=QUEUES)
        yield broker
    finally:
        broker.stop()


def member(broker: InProcessBroker, name: str) -> PushConsumer:
    consumer = PushConsumer(GROUP, broker.address, instance_name=name, consume_thread_max=1)
    consumer.subscribe(TOPIC)
    consumer.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    return consumer


def held_pulls(broker: InProcessBroker, mq: MessageQueue) -> list[HeldPullRequest]:
    """The pulls the broker holds for `mq` now (white box: the hold table by queue)."""
    hold = broker.controller.hold_service
    with hold._lock:
        return list(hold._table.get(build_key(mq.topic, mq.queue_id), {}))


def test_a_queue_that_moves_to_another_member_leaves_no_held_pull(
        broker: InProcessBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(push_consumer_module, "BROKER_SUSPEND_MAX_TIME_MILLIS", HELD_FOR_MS)
    hold = broker.controller.hold_service
    first, second = member(broker, "first"), member(broker, "second")
    first.start()
    try:
        wait_until(lambda: len(first.process_queues()) > QUEUES - 1 and hold.held_count() == len(
            first.process_queues()), lambda: f"one held pull per queue of the first member "
                                             f"(held {hold.held_count()}, owned {first.process_queues()})")
        before = {mq: held_pulls(broker, mq) for mq in first.process_queues() if mq.topic == TOPIC}
        second.start()
        try:
            def owned() -> list[int]:
                return [sum(mq.topic == TOPIC for mq in c.process_queues()) for c in (first, second)]

            wait_until(lambda: owned() == [QUEUES // 2, QUEUES // 2], lambda: f"the queues split: {owned()}")
            moved = [mq for mq in before if mq in second.process_queues()]
            assert len(moved) == QUEUES // 2

            def new_pulls_held() -> bool:   # the second member's own pulls of the queues it took
                return all(any(all(p is not old for old in before[mq]) for p in held_pulls(broker, mq))
                           for mq in moved)

            wait_until(new_pulls_held, "the second member's pulls of the moved queues are held")
            def old_pulls_held() -> int:   # the first member's pulls of the queues it gave up
                return sum(p is old for mq in moved for p in held_pulls(broker, mq) for old in before[mq])

            wait_until(lambda: old_pulls_held() == 0,
                       lambda: f"the first member's pulls of the moved queues leave the hold table "
                               f"({old_pulls_held()} still held)")
            reading = lambda: len(first.process_queues()) + len(second.process_queues())  # noqa: E731
            wait_until(lambda: hold.held_count() == reading(),
                       lambda: f"held pulls only for the queues read: {hold.held_count()} held, "
                               f"{reading()} queues read")
        finally:
            second.shutdown()
    finally:
        first.shutdown()
