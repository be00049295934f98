from rmq.broker_server.offsets.consumer_manager import ConsumerManager
from rmq.broker_server.offsets.rebalance_lock_manager import MessageQueue, RebalanceLockManager
from rmq.v1 import rmq_pb2


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_consumer_list_sorted_and_expiry() -> None:
    clock = Clock()
    consumers = ConsumerManager(client_expiry_ms=120000, clock=clock)
    assert consumers.heartbeat("c2", "G", rmq_pb2.CLUSTERING, {"T": "*"})
    assert consumers.heartbeat("c1", "G", rmq_pb2.CLUSTERING, {"T": "*"})
    assert not consumers.heartbeat("c1", "G", rmq_pb2.CLUSTERING, {"T": "*"})
    assert consumers.consumer_list("G") == ["c1", "c2"]
    clock.now += 100
    consumers.heartbeat("c2", "G", rmq_pb2.CLUSTERING, {"T": "*"})
    clock.now += 21  # c1 silent for 121 s, c2 for 21 s
    assert consumers.consumer_list("G") == ["c2"]  # visible before the scan runs
    assert consumers.scan_not_active_channel() == [("G", "c1")]
    assert consumers.unregister("c2", "G")
    assert consumers.consumer_list("G") == []
    assert not consumers.unregister("c2", "G")


def test_lock_manager_tv22() -> None:
    clock = Clock()
    locks = RebalanceLockManager(max_live_time_ms=60000, clock=clock)
    mq1 = MessageQueue("T", "broker-a", 0)
    mq2 = MessageQueue("T", "broker-a", 1)
    assert locks.try_lock_batch("G", [mq1], "A") == {mq1}
    clock.now += 30
    assert locks.try_lock_batch("G", [mq1, mq2], "B") == {mq2}  # mq1 held by A
    assert locks.try_lock_batch("G", [mq1], "A") == {mq1}  # renewal refreshes
    clock.now += 59
    assert locks.try_lock_batch("G", [mq1], "B") == set()  # 59 s since renewal
    clock.now += 2
    assert locks.try_lock_batch("G", [mq1], "B") == {mq1}  # expired: B takes it
    assert locks.try_lock_batch("other-group", [mq1], "A") == {mq1}  # groups are independent


def test_unlock_only_by_holder() -> None:
    locks = RebalanceLockManager(clock=Clock())
    mq = MessageQueue("T", "broker-a", 0)
    locks.try_lock_batch("G", [mq], "A")
    locks.unlock_batch("G", [mq], "B")
    assert locks.try_lock_batch("G", [mq], "B") == set()
    locks.unlock_batch("G", [mq], "A")
    assert locks.try_lock_batch("G", [mq], "B") == {mq}
