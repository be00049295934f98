"""Queue locks of ordered consumers beyond RocketMQ's table (rebalance_lock_manager): a client
that leaves its group frees its locks at once, and a restarted broker still knows who holds
which queue (each restored lock counts as renewed at the restart)."""

from __future__ import annotations

from pathlib import Path

from rmq.broker_server.offsets.consumer_manager import ConsumerManager
from rmq.broker_server.offsets.rebalance_lock_manager import LOCKS_FILE, MessageQueue, RebalanceLockManager
from rmq.v1 import rmq_pb2
from tests.broker_server.test_membership_and_locks import Clock

MQ = [MessageQueue("T", "broker-a", i) for i in range(3)]


def test_a_client_leaving_its_group_frees_its_locks_at_once() -> None:
    consumers = ConsumerManager(clock=Clock())
    locks = RebalanceLockManager(clock=Clock())
    consumers.add_listener(locks.unlock_clients)
    for client in ("A", "B"):
        consumers.heartbeat(client, "G", rmq_pb2.CLUSTERING, {"T": "*"})
    assert locks.try_lock_batch("G", MQ[:2], "A") == set(MQ[:2])
    assert locks.try_lock_batch("other", MQ[:1], "A") == set(MQ[:1])
    assert locks.try_lock_batch("G", MQ, "B") == {MQ[2]}
    consumers.unregister("A", "G")      # what the broker does when A's watch stream ends
    assert locks.holder("G", MQ[0]) is None
    assert locks.try_lock_batch("G", MQ, "B") == set(MQ)
    assert locks.holder("other", MQ[0]) == "A"   # only the group A left


def test_locks_survive_a_broker_restart(tmp_path: Path) -> None:
    path = tmp_path / "config" / LOCKS_FILE
    clock = Clock()
    locks = RebalanceLockManager(max_live_time_ms=60000, clock=clock, path=path)
    locks.try_lock_batch("G", MQ[:2], "A")
    locks.try_lock_batch("G", MQ[2:], "B")
    locks.unlock_batch("G", MQ[2:], "B")
    clock.now += 50                       # A renewed 50 s before the restart
    restarted = RebalanceLockManager(max_live_time_ms=60000, clock=clock, path=path)
    assert restarted.try_lock_batch("G", MQ, "B") == {MQ[2]}   # A's locks were restored
    clock.now += 59
    assert restarted.try_lock_batch("G", MQ[:1], "B") == set()  # counted from the restart
    assert restarted.try_lock_batch("G", MQ[1:2], "A") == {MQ[1]}   # A renews after reconnecting
    clock.now += 2
    assert restarted.try_lock_batch("G", MQ[:2], "B") == {MQ[0]}   # A's unrenewed lock expired
