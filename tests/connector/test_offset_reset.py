"""An admin's offset reset adopted by live consumers (RocketMQ's resetOffset and its
RESET_CONSUMER_CLIENT_OFFSET to the clients), on a real in-process broker: a running PushConsumer
or PullConsumer told over its membership watch drops what it cached, reads on from the reset offset,
and never commits its old position over the reset; "skip accumulated" (reset to the latest). And
the running info such a consumer answers when asked over the same watch (consumerStatus)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq import retry
from rmq.connector.admin import MQAdmin, ResetTarget, ResetTo
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.errors import RmqError
from rmq.connector.message import MessageExt
from rmq.connector.message_listener import ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus
from rmq.connector.message_listener_orderly import ConsumeOrderlyContext, ConsumeOrderlyStatus
from rmq.connector.pull_consumer import PullConsumer
from rmq.connector.push_consumer import PushConsumer
from rmq.v1 import rmq_pb2
from tests.broker_server.in_process_broker import InProcessBroker, running_broker
from tests.waiting import wait_until

GROUP = "reset-g"
MQ = MessageQueue("Orders", "broker-a", 0)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    with running_broker(tmp_path) as running, RmqClient(running.address) as client:
        client.create_topic("Orders", queues=1)
        yield running


def send(client: RmqClient, count: int) -> None:
    client.send("Orders", [OutgoingMessage(f"m{i}".encode(), queue_id=0) for i in range(count)])


class GatedListener:
    """Records each consumed offset; blocks on the `gates` {(offset, nth time seen): event}."""

    def __init__(self, gates: dict[tuple[int, int], threading.Event]) -> None:
        self.seen: list[int] = []
        self.gates = gates
        self.waiting: tuple[int, int] | None = None

    def __call__(self, messages: tuple[MessageExt, ...],
                 context: ConsumeConcurrentlyContext) -> ConsumeConcurrentlyStatus:
        for message in messages:
            self.seen.append(message.queue_offset)
            key = (message.queue_offset, self.seen.count(message.queue_offset))
            if key in self.gates:
                self.waiting = key
                assert self.gates[key].wait(30), f"gate {key} never opened"
                self.waiting = None
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def push_consumer(broker: InProcessBroker, listener: GatedListener) -> PushConsumer:
    consumer = PushConsumer(GROUP, broker.address, consume_thread_max=1, consume_from="first",
                            persist_consumer_offset_interval_s=0.05, instance_name="reset-test")
    consumer.subscribe("Orders")
    consumer.register_message_listener(listener)
    consumer.start()
    return consumer


@contextlib.contextmanager
def blocked_consumer(broker: InProcessBroker, gates: dict[tuple[int, int], threading.Event],
                     blocked_on: tuple[int, int]) -> Iterator[tuple[RmqClient, PushConsumer, GatedListener]]:
    """10 messages sent and a live PushConsumer whose listener is blocked on `blocked_on`; every gate
    is opened and the consumer shut down after the block."""
    listener = GatedListener(gates)
    with RmqClient(broker.address) as client:
        send(client, 10)
        consumer = push_consumer(broker, listener)
        try:
            wait_until(lambda: listener.waiting == blocked_on, f"the consumer blocked on {blocked_on}")
            yield client, consumer, listener
        finally:
            for gate in gates.values():
                gate.set()
            consumer.shutdown()


def adopted(consumer: PushConsumer | PullConsumer) -> threading.Event:
    """Set once the consumer dropped the process queue it has now (what it cached of MQ): the
    reset reached it (the broker tells its consumers without waiting for them)."""
    old = consumer.rebalance_impl.process_queue_table[MQ]
    done = threading.Event()
    threading.Thread(target=lambda: wait_until(lambda: old.dropped, "the reset adopted") and done.set(),
                     daemon=True).start()
    return done


def committed(client: RmqClient) -> int:
    return client.query_consumer_offsets(GROUP, "Orders").get(MQ, -1)


def test_a_live_push_consumer_re_consumes_from_an_earlier_reset_and_never_commits_its_old_position(
        broker: InProcessBroker) -> None:
    first_pass, second_pass = threading.Event(), threading.Event()
    gates = {(6, 1): first_pass, (3, 2): second_pass}
    with blocked_consumer(broker, gates, (6, 1)) as (client, consumer, listener):
        wait_until(lambda: committed(client) == 6, lambda: f"0-5 committed: {committed(client)}")
        reached = adopted(consumer)
        report = MQAdmin(client).reset_offsets(GROUP, "Orders", ResetTarget(ResetTo.EARLIEST))
        assert report.notified == [consumer.client_id] and report.untold == []
        assert reached.wait(30), "the reset never reached the consumer"
        first_pass.set()     # the batch consumed during the reset ends: its commit must not land
        wait_until(lambda: listener.waiting == (3, 2), lambda: f"re-consumed from 0: {listener.seen}")
        # 0-2 consumed again, 3 being consumed: what the consumer commits now is 3, never the
        # 7 (or 10) of its position before the reset
        value = wait_until(lambda: (c := committed(client)) >= 3 and c, "a commit after the reset")
        assert value == 3
        second_pass.set()
        wait_until(lambda: committed(client) == 10, lambda: f"all consumed again: {committed(client)}")
        # what was cached past the reset (7-9 of the first pass) was never handed out
        assert listener.seen == list(range(7)) + list(range(10))


def test_skip_accumulated_moves_a_live_push_consumer_past_its_backlog(broker: InProcessBroker) -> None:
    gate = threading.Event()
    with blocked_consumer(broker, {(2, 1): gate}, (2, 1)) as (client, consumer, listener):
        reached = adopted(consumer)
        report = MQAdmin(client).reset_offsets(GROUP, "", ResetTarget(ResetTo.LATEST))   # every topic
        reset = {r.queue.topic: r.offset for r in report.results}
        assert reset == {"Orders": 10, retry.retry_topic(GROUP): 0}   # what the members subscribe to
        assert report.notified == [consumer.client_id]
        assert reached.wait(30), "the reset never reached the consumer"
        gate.set()
        send(client, 3)
        wait_until(lambda: committed(client) == 13, lambda: f"consumed past the backlog: {listener.seen}")
        assert listener.seen == [0, 1, 2, 10, 11, 12]


def test_an_orderly_push_consumer_adopts_a_reset_after_the_batch_it_is_consuming(
        broker: InProcessBroker) -> None:
    gate = threading.Event()
    listener = GatedListener({(2, 1): gate})

    def orderly(messages: tuple[MessageExt, ...], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        listener(messages, ConsumeConcurrentlyContext(context.message_queue))
        return ConsumeOrderlyStatus.SUCCESS

    with RmqClient(broker.address) as client:
        send(client, 10)
        consumer = PushConsumer(GROUP, broker.address, consume_from="first", instance_name="reset-orderly",
                                persist_consumer_offset_interval_s=0.05)
        consumer.subscribe("Orders")
        consumer.register_message_listener(orderly, orderly=True)
        consumer.start()
        try:
            wait_until(lambda: listener.waiting == (2, 1), "the orderly consumer blocked on offset 2")
            reached = adopted(consumer)
            report = MQAdmin(client).reset_offsets(GROUP, "Orders", ResetTarget(ResetTo.EARLIEST))
            assert report.notified == [consumer.client_id]
            gate.set()    # the reset waits for this batch (its commit is under the consume lock)
            assert reached.wait(30), "the reset never reached the consumer"
            # the first pass ends at offset 2 or runs on to 9 before the reset drops its queue (a race
            # of the consume loop with the adoption); either way the second pass is 0..9
            def again() -> list[int]:
                seen = listener.seen
                return seen[seen.index(0, 1):] if 0 in seen[1:] else []

            wait_until(lambda: committed(client) == 10 and len(again()) >= 10,
                       lambda: f"consumed again from 0: {listener.seen}, committed {committed(client)}")
            assert again() == list(range(10))     # from the reset offset, in order
        finally:
            gate.set()
            consumer.shutdown()


def test_a_live_pull_consumer_polls_from_the_reset_offset(broker: InProcessBroker) -> None:
    with RmqClient(broker.address) as client:
        send(client, 10)
        consumer = PullConsumer(GROUP, broker.address, consume_from="first", auto_commit=False,
                                pull_batch_size=4, instance_name="reset-pull")
        consumer.subscribe("Orders")
        consumer.start()
        try:
            polled = wait_until(lambda: consumer.poll(timeout=0.2), "the first messages")
            assert [m.queue_offset for m in polled] == [0, 1, 2, 3]
            consumer.commit()
            assert committed(client) == polled[-1].queue_offset + 1
            reached = adopted(consumer)
            report = MQAdmin(client).reset_offsets(GROUP, "Orders", ResetTarget(ResetTo.LATEST))
            assert report.notified == [consumer.client_id]
            assert reached.wait(30), "the reset never reached the consumer"
            send(client, 2)
            after = wait_until(lambda: [m.queue_offset for m in consumer.poll(timeout=0.2)],
                               "messages after the reset")
            assert after[0] == 10     # nothing cached before the reset is handed out
            consumer.commit()
            assert committed(client) == after[-1] + 1
        finally:
            consumer.shutdown()


def test_a_member_that_cannot_be_told_refuses_the_reset_unless_forced(broker: InProcessBroker) -> None:
    with RmqClient(broker.address) as client:
        send(client, 4)
        client.heartbeat("no-watch", GROUP, {"Orders": "*"})   # a live member without a watch
        admin = MQAdmin(client)
        with pytest.raises(RmqError, match="cannot be told of a reset.*no-watch"):
            admin.reset_offsets(GROUP, "Orders", ResetTarget(ResetTo.LATEST))
        assert committed(client) == -1           # nothing committed
        report = admin.reset_offsets(GROUP, "Orders", ResetTarget(ResetTo.LATEST), force=True)
        assert (report.notified, report.untold, committed(client)) == ([], ["no-watch"], 4)


def test_a_live_push_consumer_answers_its_running_info(broker: InProcessBroker) -> None:
    with blocked_consumer(broker, {(2, 1): threading.Event()}, (2, 1)) as (client, consumer, _):
        before_ms = int(time.time() * 1000)
        [(client_id, info)] = MQAdmin(client).running_infos(GROUP).items()
        assert isinstance(info, rmq_pb2.ConsumerRunningInfo) and client_id == consumer.client_id
        assert (info.consume_type, info.message_model, info.orderly) == (
            rmq_pb2.CONSUME_PASSIVELY, rmq_pb2.CLUSTERING, False)
        assert {s.topic: s.sub_expression for s in info.subscriptions} == {
            "Orders": "*", retry.retry_topic(GROUP): "*"}
        [queue] = [q for q in info.queues if q.queue.topic == "Orders"]
        # 0 and 1 consumed, 2 being consumed, 3-9 waiting: all of 2-9 still cached
        assert (queue.committed_offset, queue.cached_messages) == (2, 8)
        assert (queue.cached_min_offset, queue.cached_max_offset) == (2, 9)
        assert before_ms - 30_000 < queue.last_pull_ms <= before_ms + 1000
        assert before_ms - 30_000 < queue.last_consume_ms <= before_ms + 1000


def test_a_member_that_cannot_answer_is_named(broker: InProcessBroker) -> None:
    with RmqClient(broker.address) as client:
        client.heartbeat("no-watch", GROUP, {"Orders": "*"})
        infos = MQAdmin(client).running_infos(GROUP)
        assert infos.keys() == {"no-watch"} and "not online" in str(infos["no-watch"])
