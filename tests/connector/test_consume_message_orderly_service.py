"""Orderly consumption (spec consumer-pull-rebalance §17, TV-19, TV-20; consumer-startup-
allocation-ordering §5): ProcessQueue's consuming map, ConsumeMessageOrderlyService's status
handling, and RebalanceImpl's queue locks against a real RebalanceLockManager."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from rmq.broker_server.offsets.rebalance_lock_manager import RebalanceLockManager
from rmq.connector.client import MessageQueue
from rmq.connector.consume_message_orderly_service import ConsumeMessageOrderlyService, OrderlyConsumeRequest
from rmq.connector.consumer_config import ConsumeFromWhere, ConsumerConfig
from rmq.connector.message import MessageExt
from rmq.connector.message_listener_orderly import ConsumeOrderlyContext, ConsumeOrderlyStatus
from rmq.connector.offset_store import LocalFileOffsetStore, ReadOffsetType
from rmq.connector.process_queue import ProcessQueue
from rmq.connector.rebalance_impl import PullRequest, RebalanceImpl, copy_subscription
from tests.connector.sdk_support import MQ, FixedAdmin, RecordingScheduler, message

S = ConsumeOrderlyStatus
T = "TopicTest"
Q = [MessageQueue(T, "broker-a", i) for i in range(4)]


def tv19_status(consume_times: int, context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
    """[B]'s example listener (spec pull §17.2)."""
    if consume_times % 2 == 0:
        return S.SUCCESS
    if consume_times % 3 == 0:
        return S.ROLLBACK
    if consume_times % 4 == 0:
        return S.COMMIT
    if consume_times % 5 == 0:
        context.suspend_current_queue_time_millis = 3000
        return S.SUSPEND_CURRENT_QUEUE_A_MOMENT
    return S.SUCCESS


@pytest.mark.parametrize(("times", "expected"), [
    (1, S.SUCCESS), (2, S.SUCCESS), (3, S.ROLLBACK), (4, S.SUCCESS), (5, S.SUSPEND_CURRENT_QUEUE_A_MOMENT),
    (6, S.SUCCESS), (7, S.SUCCESS), (8, S.SUCCESS), (9, S.ROLLBACK), (10, S.SUCCESS), (15, S.ROLLBACK),
    (25, S.SUSPEND_CURRENT_QUEUE_A_MOMENT)])
def test_tv19_example_listener(times: int, expected: ConsumeOrderlyStatus) -> None:
    context = ConsumeOrderlyContext(MQ)
    assert tv19_status(times, context) is expected
    assert context.suspend_current_queue_time_millis == (3000 if expected is S.SUSPEND_CURRENT_QUEUE_A_MOMENT
                                                        else -1)


class Recorder:
    """An orderly listener answering from a script, recording the offsets it saw."""

    def __init__(self, statuses: Sequence[ConsumeOrderlyStatus | None]) -> None:
        self.statuses = list(statuses)
        self.seen: list[list[int]] = []

    def __call__(self, messages: Sequence[MessageExt], context: ConsumeOrderlyContext
                 ) -> ConsumeOrderlyStatus | None:
        self.seen.append([m.queue_offset for m in messages])
        status = self.statuses.pop(0) if self.statuses else S.SUCCESS
        if status is S.SUSPEND_CURRENT_QUEUE_A_MOMENT:
            context.suspend_current_queue_time_millis = 3000
        return status


def service(tmp_path: Path, listener: Recorder, *, batch: int = 3, max_reconsume_times: int | None = None,
            sent_back: list[tuple[int, int]] | None = None) -> ConsumeMessageOrderlyService:
    store = LocalFileOffsetStore(tmp_path, "G")
    scheduler = RecordingScheduler()
    impl = RebalanceImpl("G", "c1", copy_subscription("G", {T: "*"}, False), broadcasting=False,
                         strategy="avg", offset_store=store, admin=FixedAdmin({T: Q}, ["c1"]),
                         consume_from=ConsumeFromWhere.FIRST,
                         consume_timestamp_ms=0, dispatch_pull_requests=lambda requests: None, orderly=True)
    records = sent_back if sent_back is not None else []

    def send_back(m: MessageExt, level: int) -> bool:
        records.append((m.queue_offset, level))
        return True

    return ConsumeMessageOrderlyService(
        listener, ConsumerConfig("G", consume_thread_max=1, consume_message_batch_max_size=batch,
                                 max_reconsume_times=max_reconsume_times),
        offset_store=store, rebalance_impl=impl, send_message_back=send_back, scheduler=scheduler)


def locked_queue(offsets: Sequence[int]) -> ProcessQueue:
    pq = ProcessQueue()
    pq.locked = True
    assert pq.put_message([message(o) for o in offsets])   # dispatchToConsume: first put
    assert not pq.put_message([message(99)])                # a request is already due
    return pq


def test_tv20_success_commits_max_plus_one_not_increase_only(tmp_path: Path) -> None:
    listener = Recorder([S.SUCCESS])
    svc = service(tmp_path, listener)
    svc.offset_store.update_offset(MQ, 500, increase_only=False)   # a later offset: moved back
    pq = locked_queue([22, 20, 21])
    svc.run(OrderlyConsumeRequest(pq, MQ))
    assert listener.seen == [[20, 21, 22], [99]]      # offset order, batches of 3, then the rest
    assert svc.offset_store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY) == 100
    assert pq.msg_count == 0 and not pq.consuming    # idle again: the next put dispatches
    assert pq.put_message([message(100)])


def test_tv20_suspend_consumes_the_same_messages_again_after_the_suspend_time(tmp_path: Path) -> None:
    listener = Recorder([S.SUCCESS, S.SUSPEND_CURRENT_QUEUE_A_MOMENT])
    svc = service(tmp_path, listener, batch=2)
    pq = locked_queue([20, 21, 22])
    svc.run(OrderlyConsumeRequest(pq, MQ))
    assert listener.seen == [[20, 21], [22, 99]]
    assert svc.offset_store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY) == 22   # only the first batch
    scheduler = svc.scheduler
    assert isinstance(scheduler, RecordingScheduler)
    assert [delay for delay, _ in scheduler.scheduled] == [3.0]   # the context's 3000 ms
    assert pq.held_offsets() == [22, 99] and pq.msg_count == 2
    scheduler.run_all()
    svc.run(svc._pool._requests.get_nowait())   # the re-submitted request (no send-back happened)
    assert listener.seen[2:] == [[22, 99]]
    assert svc.offset_store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY) == 100


@pytest.mark.parametrize("failure", [None, "raise"])
def test_exception_or_none_suspends(tmp_path: Path, failure: str | None) -> None:
    def listener(messages: Sequence[MessageExt], context: ConsumeOrderlyContext
                 ) -> ConsumeOrderlyStatus | None:
        if failure:
            raise RuntimeError("boom")
        return None

    svc = service(tmp_path, Recorder([]))
    svc.listener = listener
    pq = locked_queue([5])
    svc.run(OrderlyConsumeRequest(pq, MQ))
    assert pq.held_offsets() == [5, 99]
    assert svc.offset_store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY) == -1
    assert [delay for delay, _ in svc.scheduler.scheduled] == [1.0]   # type: ignore[attr-defined]


def test_max_reconsume_times_moves_the_message_to_the_dlq_and_the_queue_on(tmp_path: Path) -> None:
    sent_back: list[tuple[int, int]] = []
    listener = Recorder([S.SUSPEND_CURRENT_QUEUE_A_MOMENT] * 3)
    svc = service(tmp_path, listener, batch=1, max_reconsume_times=2, sent_back=sent_back)
    pq = ProcessQueue()
    pq.locked = True
    pq.put_message([message(7), message(8)])
    for _ in range(3):
        svc.run(OrderlyConsumeRequest(pq, MQ))
    assert listener.seen == [[7], [7], [7], [8]]   # 1 attempt + 2 reconsumes, then the DLQ, then 8
    assert sent_back == [(7, -1)]                  # delay level -1: straight to %DLQ%G
    assert svc.offset_store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY) == 9


def test_unlimited_by_default(tmp_path: Path) -> None:
    sent_back: list[tuple[int, int]] = []
    listener = Recorder([S.SUSPEND_CURRENT_QUEUE_A_MOMENT] * 40)
    svc = service(tmp_path, listener, batch=1, sent_back=sent_back)
    pq = locked_queue([7])
    for _ in range(40):
        svc.run(OrderlyConsumeRequest(pq, MQ))
    assert sent_back == [] and listener.seen == [[7]] * 40


def test_autocommit_off_rollback_commit_success(tmp_path: Path) -> None:
    statuses = iter([S.ROLLBACK, S.SUCCESS, S.COMMIT])

    def listener(messages: Sequence[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        context.auto_commit = False
        return next(statuses)

    svc = service(tmp_path, Recorder([]), batch=1)
    svc.listener = listener
    pq = locked_queue([1, 2])
    svc.run(OrderlyConsumeRequest(pq, MQ))   # ROLLBACK: 1 consumed again later
    assert svc.offset_store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY) == -1
    svc.run(OrderlyConsumeRequest(pq, MQ))   # SUCCESS on 1 (not committed), COMMIT on 2 commits both
    assert svc.offset_store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY) == 3


def test_an_unlocked_or_lock_expired_queue_is_not_consumed(tmp_path: Path) -> None:
    listener = Recorder([])
    svc = service(tmp_path, listener)
    pq = locked_queue([1])
    pq.locked = False
    svc.run(OrderlyConsumeRequest(pq, MQ))
    pq.locked = True
    pq.last_lock_timestamp -= 31   # REBALANCE_LOCK_MAX_LIVE_TIME 30 s
    svc.run(OrderlyConsumeRequest(pq, MQ))
    assert listener.seen == []
    assert [delay for delay, _ in svc.scheduler.scheduled] == [0.1, 0.1]   # type: ignore[attr-defined]


def test_one_thread_per_queue(tmp_path: Path) -> None:
    """Two requests of one queue run on two threads: the listener never runs twice at once,
    and sees the offsets in order."""
    inside = threading.Semaphore(1)
    overlaps: list[int] = []
    seen: list[int] = []

    def listener(messages: Sequence[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
        if not inside.acquire(blocking=False):
            overlaps.append(messages[0].queue_offset)
            return S.SUCCESS
        seen.append(messages[0].queue_offset)
        threading.Event().wait(0.005)
        inside.release()
        return S.SUCCESS

    svc = service(tmp_path, Recorder([]), batch=1)
    svc.listener = listener
    pq = locked_queue(range(20))
    threads = [threading.Thread(target=svc.run, args=(OrderlyConsumeRequest(pq, MQ),)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert overlaps == [] and pq.msg_count == 0
    assert seen == [*range(20), 99]


class LockingAdmin(FixedAdmin):
    """Queue answers from fixed tables; locks from a real broker lock manager."""

    def __init__(self, locks: RebalanceLockManager, client_id: str, consumers: list[str]) -> None:
        super().__init__({T: Q}, consumers)
        self.locks = locks
        self.client_id = client_id

    down: frozenset[str] = frozenset()      # brokers that do not answer

    def lock_batch(self, mqs: Sequence[MessageQueue], unreachable: set[str] | None = None
                   ) -> set[MessageQueue]:
        if unreachable is not None:
            unreachable.update(mq.broker_name for mq in mqs if mq.broker_name in self.down)
        return self.locks.try_lock_batch("G", [mq for mq in mqs if mq.broker_name not in self.down],
                                         self.client_id)

    def unlock_batch(self, mqs: Sequence[MessageQueue]) -> None:
        self.locks.unlock_batch("G", mqs, self.client_id)


def orderly_rebalancer(tmp_path: Path, locks: RebalanceLockManager, client_id: str, consumers: list[str]
                       ) -> tuple[RebalanceImpl, list[PullRequest]]:
    dispatched: list[PullRequest] = []
    impl = RebalanceImpl("G", client_id, copy_subscription("G", {T: "*"}, False), broadcasting=False,
                         strategy="avg", offset_store=LocalFileOffsetStore(tmp_path / client_id, "G"),
                         admin=LockingAdmin(locks, client_id, consumers), consume_from=ConsumeFromWhere.FIRST,
                         consume_timestamp_ms=0, dispatch_pull_requests=dispatched.extend, orderly=True)
    return impl, dispatched


def test_rebalance_locks_a_queue_before_pulling_it(tmp_path: Path) -> None:
    locks = RebalanceLockManager()
    c1, pulls1 = orderly_rebalancer(tmp_path, locks, "c1", ["c1"])
    assert c1.do_rebalance() is True
    assert sorted(r.message_queue.queue_id for r in pulls1) == [0, 1, 2, 3]
    assert all(pq.locked for pq in c1.process_queue_table.values())
    # c2 joins: allocation gives it queues 2, 3, but c1 still holds their locks: nothing added,
    # and the rebalance is not balanced (RebalanceService runs it again in a moment)
    c2, pulls2 = orderly_rebalancer(tmp_path, locks, "c2", ["c1", "c2"])
    assert c2.do_rebalance() is False
    assert pulls2 == [] and c2.process_queue_table == {}
    # c1 drops them: one is being consumed (not let go: not balanced), the other one, though it
    # still holds a pulled message, is unlocked at once (no 20 s unlockDelay)
    c1.process_queue_table[Q[3]].put_message([message(0, mq=Q[3])])
    c1.process_queue_table[Q[2]].lock_consume.acquire()
    c1.admin.consumers = ["c1", "c2"]   # type: ignore[attr-defined]
    assert c1.do_rebalance() is False
    assert sorted(q.queue_id for q in c1.process_queue_table) == [0, 1, 2]
    assert (locks.holder("G", Q[2]), locks.holder("G", Q[3])) == ("c1", None)
    assert c2.do_rebalance() is False
    assert [r.message_queue.queue_id for r in pulls2] == [3]
    c1.process_queue_table[Q[2]].lock_consume.release()   # its batch is done
    assert c1.do_rebalance() is True and locks.holder("G", Q[2]) is None
    assert c2.do_rebalance() is True
    assert sorted(r.message_queue.queue_id for r in pulls2) == [2, 3]


def test_lock_all_pauses_a_queue_whose_lock_went_to_another(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    locks = RebalanceLockManager(max_live_time_ms=60000, clock=lambda: now[0])
    c1, _ = orderly_rebalancer(tmp_path, locks, "c1", ["c1"])
    c1.rebalance_by_topic(T)
    now[0] += 61                                   # c1 did not renew: expired
    assert locks.try_lock_batch("G", [Q[0]], "c2") == {Q[0]}
    c1.lock_all()
    assert not c1.process_queue_table[Q[0]].locked
    assert all(c1.process_queue_table[q].locked for q in Q[1:])
    assert "its ordered consumption pauses" in caplog.text
    locks.unlock_batch("G", [Q[0]], "c2")
    c1.lock_all()                                  # recovers by itself
    assert c1.process_queue_table[Q[0]].locked
    c1.unlock_all()
    assert all(locks.holder("G", q) is None for q in Q)


def test_an_unreachable_broker_keeps_the_locks_a_lost_connection_releases_them(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Broker down: lockAll leaves the queues as they are (RocketMQ's lockAll on an exception),
    so they resume as soon as it answers, not a lockAll period later. The client's connection
    ended: the broker released its locks at once, so the client stops consuming them too."""
    locks = RebalanceLockManager()
    c1, _ = orderly_rebalancer(tmp_path, locks, "c1", ["c1"])
    c1.rebalance_by_topic(T)
    admin: LockingAdmin = c1.admin   # type: ignore[assignment]
    admin.down = frozenset({"broker-a"})
    c1.lock_all()
    assert all(pq.locked for pq in c1.process_queue_table.values())
    c1.connection_lost("broker-b")                   # another broker's connection: none of these
    assert all(pq.locked for pq in c1.process_queue_table.values())
    c1.connection_lost("broker-a")
    assert not any(pq.locked for pq in c1.process_queue_table.values())
    assert "the connection to broker-a ended" in caplog.text
    admin.down = frozenset()
    c1.lock_all()
    assert all(pq.locked for pq in c1.process_queue_table.values())


class LateLockAdmin(LockingAdmin):
    """lockAll's request reaches the broker late: it waits (up to `LATE_S`) for an unlock of this
    client that could overtake it."""

    LATE_S = 0.5

    def __init__(self, locks: RebalanceLockManager, client_id: str, consumers: list[str]) -> None:
        super().__init__(locks, client_id, consumers)
        self.lock_all_sent = threading.Event()
        self.unlocked = threading.Event()

    def lock_batch(self, mqs: Sequence[MessageQueue], unreachable: set[str] | None = None
                   ) -> set[MessageQueue]:
        if len(mqs) > 1:
            self.lock_all_sent.set()
            self.unlocked.wait(self.LATE_S)
        return super().lock_batch(mqs, unreachable)

    def unlock_batch(self, mqs: Sequence[MessageQueue]) -> None:
        super().unlock_batch(mqs)
        self.unlocked.set()


def test_a_lock_all_on_its_way_does_not_lock_again_the_queues_a_rebalance_lets_go(tmp_path: Path) -> None:
    """c1's periodic lockAll is sent just as c2 joins and c1's rebalance lets queues 2 and 3 go:
    the lock request must not reach the broker after their unlock, or c1 holds them again,
    unrenewed, and c2 waits for the lock to lapse (60 s; the chaos start-up's "consumers to
    share the queues" timed out so)."""
    locks = RebalanceLockManager()
    c1, _ = orderly_rebalancer(tmp_path, locks, "c1", ["c1"])
    assert c1.do_rebalance() is True
    admin = c1.admin = LateLockAdmin(locks, "c1", ["c1", "c2"])
    renewal = threading.Thread(target=c1.lock_all)
    renewal.start()
    assert admin.lock_all_sent.wait(10)
    assert c1.do_rebalance() is True                  # lets queues 2 and 3 go
    renewal.join()
    assert sorted(q.queue_id for q in c1.process_queue_table) == [0, 1]
    assert (locks.holder("G", Q[2]), locks.holder("G", Q[3])) == (None, None)
    c2, pulls2 = orderly_rebalancer(tmp_path, locks, "c2", ["c1", "c2"])
    assert c2.do_rebalance() is True                  # c2 takes them at once
    assert sorted(r.message_queue.queue_id for r in pulls2) == [2, 3]


def test_a_retried_lock_does_not_take_again_a_queue_let_go_of_meanwhile(tmp_path: Path) -> None:
    """tryLockLaterAndReconsume's lock runs 100 ms after the consume request found its queue
    unlocked; if a rebalance let the queue go in between, it is not locked again."""
    locks = RebalanceLockManager()
    c1, _ = orderly_rebalancer(tmp_path, locks, "c1", ["c1"])
    assert c1.do_rebalance() is True
    svc = ConsumeMessageOrderlyService(
        Recorder([]), ConsumerConfig("G", consume_thread_max=1), offset_store=c1.offset_store,
        rebalance_impl=c1, send_message_back=lambda m, level: True, scheduler=RecordingScheduler())
    pq = c1.process_queue_table[Q[3]]
    pq.locked = False                                 # a lockAll found it taken a moment ago
    svc.run(OrderlyConsumeRequest(pq, Q[3]))          # its lock is tried again in 100 ms
    c1.admin.consumers = ["c1", "c2"]                 # type: ignore[attr-defined]
    assert c1.do_rebalance() is True                  # meanwhile c2 joins: queue 3 let go
    svc.scheduler.run_all()                           # type: ignore[attr-defined]
    assert locks.holder("G", Q[3]) is None
