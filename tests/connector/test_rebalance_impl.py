"""RebalanceImpl: computePullFromWhere (spec consumer-pull-rebalance TV-9,
consumption-longpolling-offsets TV-13), updateProcessQueueTableInRebalance (TV-10),
copySubscription (TV-24) and allocation by rebalanceByTopic."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq.connector.client import MessageQueue
from rmq.connector.consumer_config import ConsumeFromWhere
from rmq.connector.offset_store import LocalFileOffsetStore, OffsetStore, ReadOffsetType
from rmq.connector.process_queue import ProcessQueue
from rmq.connector.rebalance_impl import PullRequest, RebalanceImpl, copy_subscription
from tests.connector.sdk_support import FixedAdmin

T = "TopicTest"
RETRY = "%RETRY%G"
Q = [MessageQueue(T, "broker-a", i) for i in range(8)]
RQ = MessageQueue(RETRY, "broker-a", 0)


class FailingReadStore(LocalFileOffsetStore):
    """The offset store could not be read (RemoteBrokerOffsetStore's -2)."""

    def _read_from_store(self, mqs: list[MessageQueue]) -> dict[MessageQueue, int]:
        return dict.fromkeys(mqs, -2)


def rebalancer(
    store: OffsetStore,
    admin: FixedAdmin,
    consume_from: ConsumeFromWhere = ConsumeFromWhere.LAST,
    client_id: str = "c1",
    broadcasting: bool = False,
    strategy: str = "avg",
) -> tuple[RebalanceImpl, list[PullRequest]]:
    dispatched: list[PullRequest] = []
    impl = RebalanceImpl(
        "G",
        client_id,
        copy_subscription("G", {T: "*"}, broadcasting),
        broadcasting=broadcasting,
        strategy=strategy,
        offset_store=store,
        admin=admin,
        consume_from=consume_from,
        consume_timestamp_ms=0,
        dispatch_pull_requests=dispatched.extend,
    )
    return impl, dispatched


@pytest.fixture
def store(tmp_path: Path) -> LocalFileOffsetStore:
    return LocalFileOffsetStore(tmp_path, "G")


@pytest.mark.parametrize(
    ("consume_from", "saved", "mq", "broker_max", "expected"),
    [
        (ConsumeFromWhere.LAST, 42, Q[0], 500, 42),
        (ConsumeFromWhere.LAST, None, Q[0], 500, 500),
        (ConsumeFromWhere.LAST, None, RQ, 500, 0),
        (ConsumeFromWhere.LAST, None, Q[0], None, -1),  # maxOffset lookup fails
        (ConsumeFromWhere.FIRST, 42, Q[0], 500, 42),
        (ConsumeFromWhere.FIRST, None, Q[0], 500, 0),
        (ConsumeFromWhere.TIMESTAMP, None, Q[0], 500, 7),  # searchOffset
        (ConsumeFromWhere.TIMESTAMP, None, RQ, 500, 500),
    ],
)
def test_tv9_compute_pull_from_where(
    store: LocalFileOffsetStore,
    consume_from: ConsumeFromWhere,
    saved: int | None,
    mq: MessageQueue,
    broker_max: int | None,
    expected: int,
) -> None:
    if saved is not None:
        store.update_offset(mq, saved, increase_only=False)
        store.persist_all([mq])
        store.remove_offset(mq)
    impl, _ = rebalancer(store, FixedAdmin({}, [], {mq: broker_max}), consume_from)
    assert impl.compute_pull_from_where(mq) == expected


def test_last_reads_a_young_queue_from_its_first_message(store: LocalFileOffsetStore) -> None:
    """RocketMQ's broker answers offset 0 for a queue never committed whose first message it
    still reads from memory (a young topic): CONSUME_FROM_LAST_OFFSET then reads what it holds."""
    admin = FixedAdmin({}, [], {Q[0]: 500, Q[1]: 500})
    admin.young = {Q[0]}
    impl, _ = rebalancer(store, admin, ConsumeFromWhere.LAST)
    assert (impl.compute_pull_from_where(Q[0]), impl.compute_pull_from_where(Q[1])) == (0, 500)
    store.update_offset(Q[0], 42, increase_only=False)
    store.persist_all([Q[0]])
    store.remove_offset(Q[0])
    assert impl.compute_pull_from_where(Q[0]) == 42      # committed: where the group is


@pytest.mark.parametrize("consume_from", [ConsumeFromWhere.LAST, ConsumeFromWhere.FIRST])
def test_tv9_unreadable_store_skips_the_queue(tmp_path: Path, consume_from: ConsumeFromWhere) -> None:
    impl, _ = rebalancer(FailingReadStore(tmp_path, "G"), FixedAdmin({}, []), consume_from)
    assert impl.compute_pull_from_where(Q[0]) == -1


def test_tv10_drop_keep_add(store: LocalFileOffsetStore) -> None:
    q1, q2, q3 = Q[1], Q[2], Q[3]
    other = MessageQueue("Other", "broker-a", 0)
    impl, dispatched = rebalancer(store, FixedAdmin({}, [], {q3: 0}), ConsumeFromWhere.LAST)
    pq1, pq2, pq_other = ProcessQueue(), ProcessQueue(), ProcessQueue()
    impl.process_queue_table.update({q1: pq1, q2: pq2, other: pq_other})
    store.update_offset(q1, 17, increase_only=False)
    assert impl.update_process_queue_table_in_rebalance(T, {q2, q3}) is True
    assert pq1.dropped and q1 not in impl.process_queue_table
    assert store.read_offset(q1, ReadOffsetType.READ_FROM_MEMORY) == -1  # removed from memory
    assert store.read_offset(q1, ReadOffsetType.READ_FROM_STORE) == 17  # persisted first
    assert impl.process_queue_table[q2] is pq2 and not pq2.dropped
    assert [(r.message_queue, r.next_offset) for r in dispatched] == [(q3, 0)]
    assert impl.process_queue_table[q3] is dispatched[0].process_queue
    assert impl.process_queue_table[other] is pq_other and not pq_other.dropped


def test_tv10_negative_start_offset_adds_nothing(store: LocalFileOffsetStore) -> None:
    impl, dispatched = rebalancer(store, FixedAdmin({}, [], {Q[3]: None}))
    impl.process_queue_table[Q[2]] = ProcessQueue()
    assert impl.update_process_queue_table_in_rebalance(T, {Q[2], Q[3]}) is False
    assert Q[3] not in impl.process_queue_table and dispatched == []


def test_tv24_copy_subscription() -> None:
    assert set(copy_subscription("G", {T: "*"}, broadcasting=False)) == {T, RETRY}
    assert set(copy_subscription("G", {T: "*"}, broadcasting=True)) == {T}


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [
        ("avg", {"c1": [0, 1, 2], "c2": [3, 4, 5], "c3": [6, 7]}),
        ("circle", {"c1": [0, 3, 6], "c2": [1, 4, 7], "c3": [2, 5]}),
    ],
)
def test_rebalance_by_topic_allocates_and_the_retry_topic_fails_quietly(
    store: LocalFileOffsetStore,
    strategy: str,
    expected: dict[str, list[int]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    for client_id, queue_ids in expected.items():
        admin = FixedAdmin({T: list(reversed(Q))}, ["c3", "c1", "c2"])  # sorted before allocation
        impl, dispatched = rebalancer(store, admin, ConsumeFromWhere.FIRST, client_id, strategy=strategy)
        impl.do_rebalance()  # no route for %RETRY%G: skipped without a warning
        assert sorted(r.message_queue.queue_id for r in dispatched) == queue_ids
    assert "rebalanceByTopic Exception" not in caplog.text


def test_broadcasting_takes_every_queue(store: LocalFileOffsetStore) -> None:
    impl, dispatched = rebalancer(
        store, FixedAdmin({T: Q}, ["c1", "c2"]), ConsumeFromWhere.FIRST, broadcasting=True
    )
    impl.do_rebalance()
    assert [r.message_queue for r in dispatched] == Q
