"""Bounds on what clients make the broker hold (issue #18): the long-polling hold table, the
consumer table, the queue-lock table and the committed-offset table each refuse one entry past
their setting with LIMIT_EXCEEDED naming it, leave the table as it was, and make room again as
entries leave."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.long_polling.pull_request_hold_service import HoldTableFull, PullRequestHoldService
from rmq.broker_server.offsets.consumer_manager import ConsumerManager, ConsumerTableLimits
from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager, OffsetKey
from rmq.broker_server.offsets.rebalance_lock_manager import MessageQueue, RebalanceLockManager
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from tests.broker_server.in_process_broker import InProcessBroker
from tests.waiting import wait_until, wait_until_async

CLUSTERING = rmq_pb2.CLUSTERING


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def refused(action, setting: str) -> BrokerError:
    with pytest.raises(BrokerError) as caught:
        action()
    assert caught.value.code == rmq_pb2.LIMIT_EXCEEDED
    assert setting in caught.value.message
    return caught.value


def test_hold_table_refuses_one_past_max_held_and_makes_room_as_pulls_leave() -> None:
    async def scenario() -> None:
        service = PullRequestHoldService(lambda topic, queue_id: 0, check_interval_ms=60000, max_held=2)
        service.start()
        first = asyncio.create_task(service.suspend("T", 0, 0, None, 60000))
        second = asyncio.create_task(service.suspend("T", 1, 0, None, 60000))
        await wait_until_async(lambda: service.held_count() == 2, "both pulls held")
        with pytest.raises(HoldTableFull) as caught:
            await service.suspend("T", 2, 0, None, 60000)
        assert caught.value.code == rmq_pb2.LIMIT_EXCEEDED
        assert "max_held_pulls" in caught.value.message
        assert service.held_count() == 2
        service.notify_message_arriving("T", 0, 1)          # woken by an arrival
        await first
        assert service.held_count() == 1
        third = asyncio.create_task(service.suspend("T", 2, 0, None, 50))   # answered at its timeout
        await third
        second.cancel()                                     # a client that went away
        await asyncio.gather(second, return_exceptions=True)
        assert service.held_count() == 0
        again = asyncio.create_task(service.suspend("U", 0, 0, None, 60000))
        await wait_until_async(lambda: service.held_count() == 1, "the pull held")
        service.wake_topic("U")
        await again
        assert service.held_count() == 0
        service.shutdown()

    asyncio.run(asyncio.wait_for(scenario(), 10))


def consumers(**limits: int) -> ConsumerManager:
    return ConsumerManager(clock=Clock(), limits=ConsumerTableLimits(**limits))


def test_consumer_groups_bounded_known_group_still_admitted() -> None:
    table = consumers(max_groups=2)
    table.heartbeat("c1", "G1", CLUSTERING, {"T": "*"})
    table.heartbeat("c1", "G2", CLUSTERING, {"T": "*"})
    assert not table.admits_group("G3")
    refused(lambda: table.heartbeat("c1", "G3", CLUSTERING, {"T": "*"}), "max_consumer_groups")
    assert table.table_sizes() == (2, 2)
    assert table.admits_group("G1")
    table.heartbeat("c2", "G1", CLUSTERING, {"T": "*"})        # a known group takes new clients
    table.unregister("c1", "G2")
    table.heartbeat("c1", "G3", CLUSTERING, {"T": "*"})        # G2 left: room for G3
    assert table.table_sizes() == (2, 3)


def test_clients_bounded_per_group_and_overall_refresh_always_admitted() -> None:
    table = consumers(max_clients_per_group=2, max_clients=3)
    table.heartbeat("a", "G", CLUSTERING, {})
    table.heartbeat("b", "G", CLUSTERING, {})
    refused(lambda: table.heartbeat("c", "G", CLUSTERING, {}), "max_clients_per_group")
    table.heartbeat("a", "G", CLUSTERING, {"T": "*"})          # a refresh is no new client
    table.heartbeat("c", "H", CLUSTERING, {})
    refused(lambda: table.heartbeat("d", "I", CLUSTERING, {}), "max_consumer_clients")
    assert table.table_sizes() == (2, 3)
    assert table.consumer_list("G") == ["a", "b"]


def test_expired_clients_leave_room_after_the_scan() -> None:
    clock = Clock()
    table = ConsumerManager(client_expiry_ms=1000, clock=clock, limits=ConsumerTableLimits(max_clients=1))
    table.heartbeat("a", "G", CLUSTERING, {"T": "*"})
    refused(lambda: table.heartbeat("b", "G", CLUSTERING, {}), "max_consumer_clients")
    clock.now += 2
    assert table.scan_not_active_channel() == [("G", "a")]
    assert table.table_sizes() == (0, 0) and table.subscription_bytes() == 0
    table.heartbeat("b", "G", CLUSTERING, {})


def test_subscriptions_bounded_per_heartbeat_and_in_total() -> None:
    table = consumers(max_subscriptions_per_client=2, max_subscription_bytes=10)
    refused(lambda: table.heartbeat("a", "G", CLUSTERING, {"T1": "*", "T2": "*", "T3": "*"}),
            "max_subscriptions_per_client")
    table.heartbeat("a", "G", CLUSTERING, {"T1": "*", "T2": "*"})  # 6 characters
    assert table.subscription_bytes() == 6
    refused(lambda: table.heartbeat("b", "G", CLUSTERING, {"T3": "A||B"}), "max_subscription_bytes")
    table.heartbeat("a", "G", CLUSTERING, {"T1": "A||B||C"})     # replaces its own: 9 characters
    assert table.subscription_bytes() == 9
    assert table.table_sizes() == (1, 1)
    table.unregister("a", "G")
    assert table.subscription_bytes() == 0


def test_lock_table_purges_expired_locks_and_refuses_past_max_locks() -> None:
    clock = Clock()
    locks = RebalanceLockManager(max_live_time_ms=60000, clock=clock, max_locks=3)
    queues = [MessageQueue("T", "broker-a", queue_id) for queue_id in range(4)]
    assert locks.try_lock_batch("G", queues[:2], "A") == set(queues[:2])
    refused(lambda: locks.try_lock_batch("H", queues[:2], "B"), "max_queue_locks")
    assert locks.size() == 2
    assert locks.try_lock_batch("G", queues[:2], "A") == set(queues[:2])   # renewal takes no place
    assert locks.try_lock_batch("G", queues[2:3], "B") == {queues[2]}
    assert locks.size() == 3
    clock.now += 30
    assert locks.purge_expired() == 0
    clock.now += 31                                                     # 61 s since the last lock
    assert locks.purge_expired() == 3
    assert locks.size() == 0
    assert locks.try_lock_batch("H", queues[1:4], "B") == set(queues[1:4])


def test_offset_table_refuses_new_entries_past_max(tmp_path: Path) -> None:
    offsets = ConsumerOffsetManager(tmp_path, max_entries=2)
    offsets.commit_offset("G", "T", 0, 1)
    offsets.commit_offset("G", "T", 1, 1)
    offsets.commit_client_offsets("", {OffsetKey("G", "T", 0): 2, OffsetKey("G", "T", 1): 2})   # known: room
    refused(lambda: offsets.commit_client_offsets("", {OffsetKey("G", "T", 2): 1}), "max_consumer_offsets")
    offsets.remove_offset("G", "T", 1)
    offsets.commit_client_offsets("", {OffsetKey("G", "T", 2): 1})
    assert offsets.size() == 2


# ---------------------------------------------------------------- a whole broker over gRPC

TOPIC = "bounded"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    broker = InProcessBroker(tmp_path_factory.mktemp("store"), max_held_pulls=2, max_consumer_groups=2,
                             max_queue_locks=2, max_consumer_offsets=2).start()
    with grpc.insecure_channel(broker.address) as channel:
        config = rmq_pb2.TopicConfig(topic_name=TOPIC, read_queue_nums=4, write_queue_nums=4, perm=6)
        created = rmq_pb2_grpc.AdminServiceStub(channel).CreateTopic(
            rmq_pb2.CreateTopicRequest(config=config), timeout=10)
        assert created.status.code == rmq_pb2.OK
    yield broker
    broker.stop()


@pytest.fixture
def stub(broker: InProcessBroker) -> Iterator[rmq_pb2_grpc.MessagingServiceStub]:
    with grpc.insecure_channel(broker.address) as channel:
        yield rmq_pb2_grpc.MessagingServiceStub(channel)


def assert_limit(status: rmq_pb2.Status, setting: str) -> None:
    assert status.code == rmq_pb2.LIMIT_EXCEEDED, status
    assert setting in status.message


def test_held_pull_past_the_bound_is_answered_limit_exceeded(
        broker: InProcessBroker, stub: rmq_pb2_grpc.MessagingServiceStub) -> None:
    def pull(queue_id: int, timeout_ms: int) -> grpc.Future:
        request = rmq_pb2.PullMessageRequest(
            consumer_group="held", topic=TOPIC, queue_id=queue_id, queue_offset=0, max_messages=1,
            sys_flag=rmq_pb2.FLAG_SUSPEND, suspend_timeout_ms=timeout_ms, sub_expression="*")
        return stub.PullMessage.future(request, timeout=30)

    held = [pull(0, 3000), pull(1, 3000)]
    wait_until(lambda: broker.controller.hold_service.held_count() == 2, "the two pulls held")
    assert_limit(pull(2, 3000).result().status, "max_held_pulls")
    assert [future.result().pull_status for future in held] == [rmq_pb2.NO_NEW_MSG] * 2
    assert pull(2, 10).result().pull_status == rmq_pb2.NO_NEW_MSG     # room again


def heartbeat(stub: rmq_pb2_grpc.MessagingServiceStub, group: str) -> rmq_pb2.HeartbeatResponse:
    return stub.Heartbeat(rmq_pb2.HeartbeatRequest(
        client_id="c1", consumer_group=group, message_model=rmq_pb2.CLUSTERING,
        subscriptions=[rmq_pb2.Subscription(topic=TOPIC, sub_expression="*")]), timeout=10)


def test_group_past_the_bound_is_refused_and_gets_no_retry_topic(
        broker: InProcessBroker, stub: rmq_pb2_grpc.MessagingServiceStub) -> None:
    topics = broker.controller.topics
    assert [heartbeat(stub, group).status.code for group in ("g1", "g2")] == [rmq_pb2.OK] * 2
    assert_limit(heartbeat(stub, "g3").status, "max_consumer_groups")
    assert topics.get("%RETRY%g2") is not None and topics.get("%RETRY%g3") is None
    assert broker.controller.consumers.table_sizes() == (2, 2)


def test_locks_only_for_real_queues_and_bounded(
        broker: InProcessBroker, stub: rmq_pb2_grpc.MessagingServiceStub) -> None:
    def lock(topic: str, *queue_ids: int) -> rmq_pb2.LockBatchResponse:
        return stub.LockBatchMQ(rmq_pb2.LockBatchRequest(
            consumer_group="orderly", client_id="c1",
            queues=[rmq_pb2.MessageQueue(topic=topic, broker_name="broker-a", queue_id=q)
                    for q in queue_ids]), timeout=10)

    assert lock("no-such-topic", 0).status.code == rmq_pb2.TOPIC_NOT_EXIST
    assert lock(TOPIC, 99).status.code == rmq_pb2.ILLEGAL_ARGUMENT
    assert len(lock(TOPIC, 0, 1).locked_queues) == 2
    assert_limit(lock(TOPIC, 2).status, "max_queue_locks")
    assert broker.controller.locks.size() == 2


def test_offsets_past_the_bound_are_refused_whole(
        broker: InProcessBroker, stub: rmq_pb2_grpc.MessagingServiceStub) -> None:
    def commit(*queue_ids: int) -> rmq_pb2.UpdateConsumerOffsetsResponse:
        return stub.UpdateConsumerOffsets(rmq_pb2.UpdateConsumerOffsetsRequest(
            consumer_group="committer",
            offsets=[rmq_pb2.ConsumerOffset(topic=TOPIC, queue_id=q, offset=1) for q in queue_ids]),
            timeout=10)

    assert commit(0).status.code == rmq_pb2.OK
    assert_limit(commit(1, 2).status, "max_consumer_offsets")      # two new ones: none stored
    assert broker.controller.offsets.query_offsets("committer") == {OffsetKey("committer", TOPIC, 0): 1}
    assert commit(0, 1).status.code == rmq_pb2.OK
