"""A producer leaves a master that stored a send alone and finds the group's new master even when
the first name server it asks does not know it yet (issue 47, the chaos runs' bridge: the new
master could not reach that name server, which went on naming the deposed one, or none)."""

from __future__ import annotations

from pathlib import Path

import grpc

from rmq.connector.client import RmqClient
from rmq.connector.client_sends import OutgoingMessage
from rmq.connector.route_cache import newest_masters
from rmq.statuses import SendStatus
from rmq.store import BrokerRole
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from testing import processes
from tests.broker_server.in_process_broker import InProcessBroker
from tests.waiting import wait_until

TOPIC = "orders"
GROUP = "chaos-b"
OLD, NEW = "10.0.0.1:9876", "10.0.0.2:9876"    # ids 0 and 1 (never dialled: only routes are asked)


def data(*members: tuple[int, str, int, int]) -> rmq_pb2.BrokerData:
    """A group's BrokerData: members (id, address, role, epoch), as a name server answers it."""
    return rmq_pb2.BrokerData(broker_name=GROUP, address=members[0][1], members=[
        rmq_pb2.BrokerMember(broker_id=i, address=a, role=r, epoch=e) for i, a, r, e in members])


def answer(group: rmq_pb2.BrokerData, perm: int) -> rmq_pb2.QueryRouteResponse:
    return rmq_pb2.QueryRouteResponse(brokers=[group], queue_datas=[
        rmq_pb2.QueueData(broker_name=GROUP, read_queue_nums=4, write_queue_nums=4, perm=perm)])


def test_each_group_is_taken_from_the_answer_naming_its_newest_master() -> None:
    stale = answer(data((0, OLD, rmq_pb2.SYNC_MASTER, 1), (1, NEW, rmq_pb2.SLAVE, 1)), perm=6)
    masterless = answer(data((0, OLD, rmq_pb2.SLAVE, 2), (1, NEW, rmq_pb2.SLAVE, 1)), perm=4)
    fresh = answer(data((0, OLD, rmq_pb2.SLAVE, 2), (1, NEW, rmq_pb2.SYNC_MASTER, 2)), perm=6)
    for answers in ([stale, fresh], [fresh, stale], [masterless, fresh], [stale, masterless, fresh]):
        merged = newest_masters(answers)
        assert [b.address for b in merged.brokers] == [OLD], "the group as the fresh answer has it"
        assert merged.brokers[0] == fresh.brokers[0] and list(merged.queue_datas) == list(fresh.queue_datas)
    assert newest_masters([masterless, stale]).brokers[0] == stale.brokers[0]   # a master over none


def register(namesrv: str, member: tuple[int, str, int, int]) -> None:
    """`member` (id, address, role, epoch) of GROUP registers TOPIC with the name server."""
    broker_id, address, role, epoch = member
    request = rmq_pb2.RegisterBrokerRequest(
        broker=rmq_pb2.BrokerData(broker_name=GROUP, address=address),
        topics=[rmq_pb2.TopicConfig(topic_name=TOPIC, read_queue_nums=4, write_queue_nums=4, perm=6)],
        member=rmq_pb2.BrokerMember(broker_id=broker_id, address=address, role=role, epoch=epoch))
    with grpc.insecure_channel(namesrv) as channel:
        response = rmq_pb2_grpc.NameServerServiceStub(channel).RegisterBroker(request, timeout=10)
    assert response.status.code == rmq_pb2.OK, response.status.message


def test_after_a_doubted_send_the_route_names_the_master_another_name_server_knows(tmp_path: Path) -> None:
    """Name server 1 still has id 0 as master of epoch 1 (id 1 could not reach it); name server 2
    heard id 1 take epoch 2. A route asked as usual comes from the first; once a send was doubted
    (stored on the master alone, or failed) every name server is asked and id 1 is the master."""
    for name in ("ns1", "ns2"):
        (tmp_path / name).mkdir()
    stale_ns = processes.namesrv(tmp_path / "ns1").start()
    fresh_ns = processes.namesrv(tmp_path / "ns2").start()
    try:
        register(stale_ns.address, (0, OLD, rmq_pb2.SYNC_MASTER, 1))
        register(stale_ns.address, (1, NEW, rmq_pb2.SLAVE, 1))
        register(fresh_ns.address, (0, OLD, rmq_pb2.SLAVE, 2))
        register(fresh_ns.address, (1, NEW, rmq_pb2.SYNC_MASTER, 2))
        with RmqClient([stale_ns.address, fresh_ns.address]) as client:
            assert client.route(TOPIC).brokers == {GROUP: OLD}
            client.routes.doubt(TOPIC)
            route = client.route(TOPIC)
            assert route.brokers == {GROUP: NEW} and route.writable_brokers() == [GROUP]
            assert not client.routes.doubted(TOPIC)      # asked once; then the first again as usual
    finally:
        stale_ns.stop()
        fresh_ns.stop()


def test_a_send_a_master_stored_alone_doubts_the_route(tmp_path: Path) -> None:
    """A SYNC_MASTER with no slave answers SLAVE_NOT_AVAILABLE: the send succeeded on the master
    only, and the next route query asks every endpoint (the group may have a new master)."""
    broker = InProcessBroker(tmp_path / "store", broker_role=BrokerRole.SYNC_MASTER).start()
    try:
        with RmqClient(broker.address) as client:
            client.create_topic(TOPIC, queues=1)
            wait_until(lambda: client.query_route(TOPIC).message_queues, "the topic routed")
            assert not client.routes.doubted(TOPIC)
            sent = client.send(TOPIC, [OutgoingMessage(b"alone")])
            assert sent.status is SendStatus.SLAVE_NOT_AVAILABLE
            assert client.routes.doubted(TOPIC)
    finally:
        broker.stop()
