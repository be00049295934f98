"""Orderly queues change hands without stalling and without overlap (issue 32 item 4, issue 26
item 5). Consumer A's listener works on queue q longer than the broker's lock lifetime; B
joins and is allocated q. A keeps renewing its lock, so B neither locks q nor gets its
messages while A's batch runs; once it is done A lets q go at once and B takes it over in
seconds (not at the next 20 s rebalance), from the offset A committed."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.message import MessageExt
from rmq.connector.message_listener_orderly import ConsumeOrderlyContext, ConsumeOrderlyStatus
from rmq.connector.push_consumer import PushConsumer
from rmq.connector.rebalance_impl import PullRequest
from tests.broker_server.in_process_broker import InProcessBroker
from tests.waiting import wait_until

LOCK_LIFETIME_MS = 2000
TOPIC = "OrderedHandOff"
GROUP = "orderly-hand-off"
Q0 = MessageQueue(TOPIC, "broker-a", 0)


class FakeClock:
    def __init__(self) -> None:
        self.now = time.monotonic()

    def __call__(self) -> float:
        return self.now


@dataclass
class Recorder:
    """What a consumer's orderly listener saw: (queue offset, start, end) per message; the
    first message of q0 for consumer A blocks until `release` is set."""

    blocking: bool
    started: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    seen: list[tuple[int, float, float]] = field(default_factory=list)

    def __call__(self, messages: tuple[MessageExt, ...], context: ConsumeOrderlyContext
                 ) -> ConsumeOrderlyStatus:
        begin = time.monotonic()
        for message in messages:
            if message.message_queue == Q0:
                if self.blocking and message.queue_offset == 0:
                    self.started.set()
                    assert self.release.wait(60)
                self.seen.append((message.queue_offset, begin, time.monotonic()))
        return ConsumeOrderlyStatus.SUCCESS


@pytest.fixture
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InProcessBroker, FakeClock]]:
    broker = InProcessBroker(tmp_path_factory.mktemp("hand-off") / "store",
                             rebalance_lock_max_live_time_ms=LOCK_LIFETIME_MS)
    clock = FakeClock()
    broker.controller.locks._clock = clock   # the lock lifetime passes when the test says so
    broker.start()
    with RmqClient(broker.address) as client:
        client.create_topic(TOPIC, queues=2)
        client.send(TOPIC, [OutgoingMessage(b"m0", queue_id=0)])
    yield broker, clock
    broker.stop()


@contextlib.contextmanager
def _releasing(listener: Recorder) -> Iterator[None]:
    try:
        yield
    finally:
        listener.release.set()


def consumer(address: str, instance: str, listener: Recorder) -> PushConsumer:
    # client ids sort by instance: B ("1") is allocated q0, A ("2") q1 once both are members;
    # the periodic rebalance is far away, so only the hand-off's own retries can be at work
    push = PushConsumer(GROUP, address, instance_name=instance, consume_from="first", lock_interval_s=0.2,
                        rebalance_interval_s=120)
    push.subscribe(TOPIC)
    push.register_message_listener(listener, orderly=True)
    return push


@contextlib.contextmanager
def a_working_on_q0(server: InProcessBroker, seen_by_a: Recorder) -> Iterator[PushConsumer]:
    """Consumer A, its listener at work on q0's first message (until `seen_by_a.release`) and
    its membership watch open. A failing wait releases the listener at once, so the consumers
    stop (a broken hand-off fails in seconds, not after the listener's 60 s)."""
    with consumer(server.address, "2", seen_by_a) as a, _releasing(seen_by_a):
        assert seen_by_a.started.wait(30)
        wait_until(lambda: server.controller.watches.watcher_count() == 1, "A's membership watch is open")
        yield a


def test_a_queue_changes_hands_after_the_running_batch_and_never_overlaps(
        broker: tuple[InProcessBroker, FakeClock]) -> None:
    server, clock = broker
    seen_by_a, seen_by_b = Recorder(blocking=True), Recorder(blocking=False)
    with a_working_on_q0(server, seen_by_a) as a:
        with RmqClient(server.address) as client:
            client.send(TOPIC, [OutgoingMessage(b"m1", queue_id=0)])
        with consumer(server.address, "1", seen_by_b) as b:
            wait_until(lambda: a.rebalance_impl.process_queue_table[Q0].dropped, "A lets q0 go")
            # Four lock lifetimes pass while A's listener runs; A renews q0's lock all along.
            for _ in range(4):
                clock.now += LOCK_LIFETIME_MS / 1000 * 0.75
                pq = a.rebalance_impl.process_queue_table[Q0]
                for _renewal in range(2):
                    renewed = pq.last_lock_timestamp
                    wait_until(lambda: pq.last_lock_timestamp != renewed,    # noqa: B023
                               "A renews its lock on q0 (without it the lock lapses and B takes q0)")
                assert server.controller.locks.holder(GROUP, Q0) == a.client_id
                assert Q0 not in b.rebalance_impl.process_queue_table and seen_by_b.seen == []
            released = time.monotonic()
            seen_by_a.release.set()
            wait_until(lambda: bool(seen_by_b.seen), "B consumes q0 within 15 s of A's batch", timeout=15)
            handed_over_s = time.monotonic() - released
    assert [offset for offset, _, _ in seen_by_a.seen] == [0]
    assert [offset for offset, _, _ in seen_by_b.seen] == [1]    # from A's commit: nothing twice
    assert seen_by_a.seen[0][2] <= seen_by_b.seen[0][1]          # no overlap
    # issue 32: within 5 s (the previous rebalance-driven retry took 20-40 s; here 120 s)
    assert handed_over_s < 15, handed_over_s


def _offsets(listener: Recorder) -> list[int]:
    return [offset for offset, _, _ in listener.seen]


def _send_to_q0(address: str, body: bytes) -> None:
    with RmqClient(address) as client:
        client.send(TOPIC, [OutgoingMessage(body, queue_id=0)])


def test_a_queue_given_back_while_its_dropped_batch_runs_is_pulled_again_once_the_batch_ends(
        broker: tuple[InProcessBroker, FakeClock]) -> None:
    """A lets q0 go while its listener runs (B joined), and B leaves before A's batch ends, so
    the allocation gives q0 back to A with its dropped ProcessQueue still in the table. A pulls
    q0 again (a fresh ProcessQueue from the committed offset) once the batch is done, not after
    the 120 s pull-idle expiry."""
    server, _clock = broker
    seen_by_a, seen_by_b = Recorder(blocking=True), Recorder(blocking=False)
    with a_working_on_q0(server, seen_by_a) as a, RmqClient(server.address) as client:
        with consumer(server.address, "1", seen_by_b):
            wait_until(lambda: a.rebalance_impl.process_queue_table[Q0].dropped, "A lets q0 go")
        wait_until(lambda: client.consumer_list(GROUP, TOPIC) == [a.client_id], "B left the group")
        a.rebalance_impl.do_rebalance()   # A's rebalance has seen q0 given back before its batch ends
        _send_to_q0(server.address, b"m1")
        seen_by_a.release.set()
        wait_until(lambda: _offsets(seen_by_a) == [0, 1],
                   lambda: f"A consumes q0's next message once its batch ends (A saw {_offsets(seen_by_a)})",
                   timeout=15)
    assert seen_by_b.seen == []


def test_a_queue_removed_after_offset_illegal_mid_batch_is_let_go_once_the_batch_ends(
        broker: tuple[InProcessBroker, FakeClock]) -> None:
    """OFFSET_ILLEGAL's removal of q0 comes while A's listener runs on it: A keeps q0's lock
    until the batch ends and lets it go then, so B, allocated q0 meanwhile, takes it over in
    seconds (the broker lock's lifetime never passes here) and never while A's batch runs."""
    server, _clock = broker
    seen_by_a, seen_by_b = Recorder(blocking=True), Recorder(blocking=False)
    with a_working_on_q0(server, seen_by_a) as a:
        # what a pull's OFFSET_ILLEGAL does: drop the queue, then (10 s later) store the offset the
        # broker gave and remove the queue
        pq = a.rebalance_impl.process_queue_table[Q0]
        pq.dropped = True
        a._fix_offset(PullRequest(GROUP, Q0, pq, 1))
        _send_to_q0(server.address, b"m1")
        with consumer(server.address, "1", seen_by_b) as b, RmqClient(server.address) as client:
            wait_until(lambda: len(client.consumer_list(GROUP, TOPIC)) == 2, "B joined the group")
            a.rebalance_impl.do_rebalance()   # A's rebalance has seen q0 go to B before A's batch ends
            assert Q0 not in b.rebalance_impl.process_queue_table
            assert server.controller.locks.holder(GROUP, Q0) == a.client_id   # A's batch still runs
            seen_by_a.release.set()
            wait_until(lambda: bool(seen_by_b.seen), "B consumes q0 within 15 s of A's batch", timeout=15)
    assert _offsets(seen_by_a) == [0] and _offsets(seen_by_b) == [1]
    assert seen_by_a.seen[0][2] <= seen_by_b.seen[0][1]          # no overlap
