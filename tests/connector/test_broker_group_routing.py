"""Client-side routing in a broker group (docs/replication.md; spec consumer-pull-rebalance
§12.4 findBrokerAddressInSubscribe): the suggested member, else the master, else a slave."""

from __future__ import annotations

from rmq.connector.client import BrokerMember, TopicRoute, choose_member
from rmq.v1 import rmq_pb2

MASTER = BrokerMember(0, "10.0.0.1:1", rmq_pb2.SYNC_MASTER)
SLAVE_1 = BrokerMember(1, "10.0.0.2:1", rmq_pb2.SLAVE)
SLAVE_2 = BrokerMember(2, "10.0.0.3:1", rmq_pb2.SLAVE)
GROUP = (SLAVE_2, MASTER, SLAVE_1)


def test_the_suggested_member_first_then_the_master_then_the_lowest_slave() -> None:
    assert choose_member(GROUP, 0, set()) == MASTER.address
    assert choose_member(GROUP, 1, set()) == SLAVE_1.address           # TV-6: the master suggested 1
    assert choose_member(GROUP, 1, {SLAVE_1.address}) == MASTER.address
    assert choose_member(GROUP, 0, {MASTER.address}) == SLAVE_1.address    # master down: read a slave
    assert choose_member(GROUP, 7, set()) == MASTER.address              # an unknown id: the master
    assert choose_member(GROUP, 0, {m.address for m in GROUP}) is None
    assert choose_member((), 0, set()) is None


def test_routes_carry_every_member_and_old_brokers_count_as_masters() -> None:
    response = rmq_pb2.QueryRouteResponse(
        brokers=[rmq_pb2.BrokerData(broker_name="b1", address=MASTER.address, members=[
                     rmq_pb2.BrokerMember(broker_id=0, address=MASTER.address, role=rmq_pb2.SYNC_MASTER),
                     rmq_pb2.BrokerMember(broker_id=1, address=SLAVE_1.address, role=rmq_pb2.SLAVE)]),
                 rmq_pb2.BrokerData(broker_name="old", address="10.0.0.9:1")],
        queue_datas=[rmq_pb2.QueueData(broker_name="b1", read_queue_nums=1, write_queue_nums=1, perm=6)])
    route = TopicRoute.from_proto("T", response)
    assert route.members["b1"] == (MASTER, SLAVE_1)
    assert route.members["old"] == (BrokerMember(0, "10.0.0.9:1", rmq_pb2.ASYNC_MASTER),)


def test_under_a_controller_the_master_is_found_by_role_and_epoch_not_by_id() -> None:
    """docs/controller.md: id 1 elected in epoch 2; id 0 back as its slave, or still listed as
    the master of epoch 1 until the name server expires it."""
    new_master = BrokerMember(1, "10.0.0.2:1", rmq_pb2.SYNC_MASTER, epoch=2)
    returned = BrokerMember(0, "10.0.0.1:1", rmq_pb2.SLAVE, epoch=2)
    stale = BrokerMember(0, "10.0.0.1:1", rmq_pb2.SYNC_MASTER, epoch=1)
    assert choose_member((returned, new_master), 0, set()) == new_master.address
    assert choose_member((stale, new_master), 0, set()) == new_master.address
    assert choose_member((returned, new_master), 0, {new_master.address}) == returned.address
    assert choose_member((returned, new_master), 1, set()) == new_master.address   # suggested by its id
