"""One ConsumerManager for every protocol's consumers (issue 42): a RocketMQ 5 consumer's Telemetry
session joins its group in the same table as rmq.v1 and 4.x heartbeats, within the same bounds, and
leaves when its stream ends; the broker assigns its queues, so it is not in the list rmq.v1 and 4.x
consumers rebalance by."""

from __future__ import annotations

from pathlib import Path

import grpc

from rmq.broker_server.offsets.consumer_manager import ConsumerManager
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from tests.broker_server.in_process_broker import running_broker
from tests.broker_server.test_membership_and_locks import Clock
from tests.broker_server.v2_calls import TelemetryStream, V2Client, publishing
from tests.waiting import wait_until

V5 = rmq_pb2.CLIENT_PROTOCOL_ROCKETMQ_V2


def consuming(group: str, topic: str = "Orders") -> v2.Settings:
    return v2.Settings(client_type=v2.PUSH_CONSUMER, subscription=v2.Subscription(
        group=v2.Resource(name=group),
        subscriptions=[v2.SubscriptionEntry(topic=v2.Resource(name=topic),
                                            expression=v2.FilterExpression(expression="*"))]))


def test_a_rocketmq5_client_is_a_member_but_not_in_the_rebalancing_list() -> None:
    clock = Clock()
    consumers = ConsumerManager(client_expiry_ms=120_000, clock=clock)
    changes: list[tuple[str, list[str]]] = []
    consumers.add_listener(lambda group, removed: changes.append((group, removed)))
    consumers.heartbeat("v1-client", "G", rmq_pb2.CLUSTERING, {"T": "*"})
    consumers.heartbeat("v5-client", "G", rmq_pb2.CLUSTERING, {"T": "*"}, protocol=V5)
    assert consumers.consumer_list("G") == ["v1-client"]      # what rmq.v1 / 4.x consumers share queues by
    assert [info.client_id for info in consumers.connections("G")] == ["v1-client", "v5-client"]
    assert changes == [("G", [])]                              # only the rmq.v1 client's join is pushed
    clock.now += 200                                          # both silent past the expiry
    assert consumers.scan_not_active_channel() == [("G", "v1-client")]   # the stream holds v5-client
    assert [info.client_id for info in consumers.connections("G")] == ["v5-client"]
    assert consumers.unregister("v5-client", "G") and consumers.group_names() == set()
    assert changes == [("G", []), ("G", ["v1-client"])]


def test_a_telemetry_consumer_joins_the_one_table_and_leaves_with_its_stream(tmp_path: Path) -> None:
    with running_broker(tmp_path / "store", max_consumer_groups=2) as broker, \
            grpc.insecure_channel(broker.address) as channel:
        controller = broker.controller
        v1 = rmq_pb2_grpc.MessagingServiceStub(channel)
        joined = v1.Heartbeat(rmq_pb2.HeartbeatRequest(
            client_id="v1-client", consumer_group="mixed", message_model=rmq_pb2.CLUSTERING,
            subscriptions=[rmq_pb2.Subscription(topic="Orders", sub_expression="*")]), timeout=10)
        assert joined.status.code == rmq_pb2.OK
        stream = TelemetryStream(V2Client(channel, "v5-client"), consuming("mixed"))
        try:
            assert stream.next().status.code == v2.OK
            [v1_member, v5_member] = controller.processors.admin.consumer_connections("mixed")
            assert (v5_member.client_id, v5_member.protocol) == ("v5-client", V5)
            assert v5_member.address and [s.topic for s in v5_member.subscriptions] == ["Orders"]
            listed = v1.GetConsumerList(rmq_pb2.GetConsumerListRequest(consumer_group="mixed"), timeout=10)
            assert list(listed.client_ids) == ["v1-client"]     # rmq.v1 rebalancing as before
            assert controller.consumers.table_sizes() == (1, 2)
            # the table's bounds hold for RocketMQ 5 consumers too: a third group is refused
            other = TelemetryStream(V2Client(channel, "v5-other"), consuming("second"))
            third = TelemetryStream(V2Client(channel, "v5-third"), consuming("third"))
            try:
                assert other.next().status.code == v2.OK
                refused = third.next().status
                assert refused.code == v2.TOO_MANY_REQUESTS and "max_consumer_groups" in refused.message
                assert controller.processors.admin.consumer_groups() >= {"mixed", "second"}
                assert "third" not in controller.consumers.group_names()
            finally:
                other.close()
                third.close()
        finally:
            stream.close()
        admin = controller.processors.admin
        wait_until(lambda: [m.client_id for m in admin.consumer_connections("mixed")] == ["v1-client"],
                   "the RocketMQ 5 client left its group with its stream")
        wait_until(lambda: "second" not in controller.consumers.group_names(), "the other group left")


def test_a_rocketmq5_heartbeat_registers_the_client_its_settings_describe(tmp_path: Path) -> None:
    """Proxy ClientActivity#heartbeat: a producer's Heartbeat puts it in its topics' producer
    groups (GetProducerConnections lists it), a consumer's refreshes it in its group, and a client
    that has sent no settings is told so."""
    with running_broker(tmp_path / "store") as broker, grpc.insecure_channel(broker.address) as channel:
        admin = rmq_pb2_grpc.AdminServiceStub(channel)
        assert V2Client(channel, "v5-unknown").heartbeat("mixed") == v2.UNRECOGNIZED_CLIENT_TYPE
        producer, consumer = V2Client(channel, "v5-producer"), V2Client(channel, "v5-consumer")
        producing, consuming_stream = TelemetryStream(producer, publishing("Orders")), \
            TelemetryStream(consumer, consuming("mixed"))
        try:
            assert producing.next().status.code == v2.OK and consuming_stream.next().status.code == v2.OK
            assert producer.heartbeat("") == v2.OK
            listed = admin.GetProducerConnections(
                rmq_pb2.GetProducerConnectionsRequest(producer_group="Orders"), timeout=10).connections
            assert [(c.client_id, c.protocol) for c in listed] == [("v5-producer", V5)]
            assert consumer.heartbeat("mixed") == v2.OK
            [member] = broker.controller.processors.admin.consumer_connections("mixed")
            assert (member.client_id, [s.topic for s in member.subscriptions]) == ("v5-consumer", ["Orders"])
        finally:
            producing.close()
            consuming_stream.close()
