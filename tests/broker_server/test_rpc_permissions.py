"""Every rmq.v1 RPC maps to the permission RocketMQ's ACL would ask for."""

from __future__ import annotations

import pytest

from rmq.broker_server.security.acl import AccessDenied, parse_acl
from rmq.broker_server.security.rpc_permissions import ADMIN_METHODS, RULES, check_call, client_id_of
from rmq.flight import DO_GET_METHOD
from rmq.v1 import rmq_pb2

ACL = parse_acl({"accounts": [
    {"accessKey": "pubonly", "secretKey": "secret-1", "topicPerms": ["orders=PUB"]},
    {"accessKey": "subonly", "secretKey": "secret-2", "topicPerms": ["orders=SUB"],
     "groupPerms": ["etl=SUB"]},
    {"accessKey": "nothing", "secretKey": "secret-3"},
    {"accessKey": "admin1", "secretKey": "secret-4", "admin": True},
    {"accessKey": "broker-a-reg", "secretKey": "secret-5", "brokerName": "broker-a"},
]}, "test")


def mq(topic: str = "orders") -> rmq_pb2.MessageQueue:
    return rmq_pb2.MessageQueue(topic=topic, broker_name="b", queue_id=0)


def method(service: str, name: str) -> str:
    return f"/rmq.v1.{service}/{name}"


def test_every_rpc_of_the_contract_has_a_rule() -> None:
    services = rmq_pb2.DESCRIPTOR.services_by_name.values()
    declared = {f"/{s.full_name}/{m.name}" for s in services for m in s.methods}
    assert declared | {DO_GET_METHOD} == set(RULES) | ADMIN_METHODS   # and the Flight data plane's read
    assert not set(RULES) & ADMIN_METHODS


SEND = (method("MessagingService", "SendMessage"), rmq_pb2.SendMessageRequest(topic="orders"))
PULL = (method("MessagingService", "PullMessage"),
        rmq_pb2.PullMessageRequest(topic="orders", consumer_group="etl"))
COMMIT = (method("MessagingService", "UpdateConsumerOffsets"), rmq_pb2.UpdateConsumerOffsetsRequest(
    consumer_group="etl", offsets=[rmq_pb2.ConsumerOffset(topic="orders", queue_id=0, offset=5)]))
OFFSETS = (method("MessagingService", "GetTopicOffsets"), rmq_pb2.GetTopicOffsetsRequest(topic="orders"))
HEARTBEAT = (method("MessagingService", "Heartbeat"), rmq_pb2.HeartbeatRequest(
    consumer_group="etl", subscriptions=[rmq_pb2.Subscription(topic="orders", sub_expression="*")]))
LOCK = (method("MessagingService", "LockBatchMQ"),
        rmq_pb2.LockBatchRequest(consumer_group="etl", queues=[mq()]))
CREATE = (method("AdminService", "CreateTopic"), rmq_pb2.CreateTopicRequest())
REGISTER = (method("NameServerService", "RegisterBroker"), rmq_pb2.RegisterBrokerRequest(
    broker=rmq_pb2.BrokerData(broker_name="broker-a", address="127.0.0.1:10911")))
REGISTER_B = (method("NameServerService", "RegisterBroker"), rmq_pb2.RegisterBrokerRequest(
    broker=rmq_pb2.BrokerData(broker_name="broker-b", address="127.0.0.1:10911")))
UNREGISTER_B = (method("NameServerService", "UnregisterBroker"),
                rmq_pb2.UnregisterBrokerRequest(broker_name="broker-b"))
GROUP_OFFSETS = (method("MessagingService", "QueryConsumerOffsets"),
                 rmq_pb2.QueryConsumerOffsetsRequest(consumer_group="etl", topic="orders"))
EVERY_TOPIC_OFFSETS = (method("MessagingService", "QueryConsumerOffsets"),
                       rmq_pb2.QueryConsumerOffsetsRequest(consumer_group="etl"))
ROUTE = (method("RouteService", "QueryRoute"), rmq_pb2.QueryRouteRequest(topic="orders"))
CONTROLLER_B = (method("ControllerService", "Heartbeat"),   # a member's role is its broker's business
                rmq_pb2.ControllerHeartbeatRequest(broker_name="broker-b", broker_id=1))


@pytest.mark.parametrize(("access_key", "call", "denial"), [
    ("pubonly", SEND, None),
    ("subonly", SEND, "access key 'subonly' lacks PUB on topic 'orders'"),
    ("subonly", PULL, None),
    ("pubonly", PULL, "access key 'pubonly' lacks SUB on topic 'orders'"),
    ("subonly", COMMIT, None),
    ("pubonly", COMMIT, "access key 'pubonly' lacks SUB on group 'etl'"),
    ("pubonly", OFFSETS, None),
    ("subonly", OFFSETS, None),
    ("nothing", OFFSETS, "access key 'nothing' lacks PUB or SUB on topic 'orders'"),
    ("subonly", HEARTBEAT, None),
    ("pubonly", HEARTBEAT, "lacks SUB on group 'etl'"),
    ("subonly", LOCK, None),
    ("nothing", LOCK, "lacks SUB on group 'etl'"),
    ("subonly", CREATE, "'subonly' is not an admin account, which /rmq.v1.AdminService/CreateTopic"),
    ("admin1", CREATE, None),
    ("pubonly", REGISTER, "access key 'pubonly' may not register broker 'broker-a'"),
    ("admin1", REGISTER, None),
    ("broker-a-reg", REGISTER, None),
    ("broker-a-reg", REGISTER_B, "access key 'broker-a-reg' may not register broker 'broker-b'"),
    ("broker-a-reg", UNREGISTER_B, "may not register broker 'broker-b'"),
    ("broker-a-reg", SEND, "lacks PUB on topic 'orders'"),
    ("subonly", GROUP_OFFSETS, None),
    ("subonly", EVERY_TOPIC_OFFSETS, "is not an admin account, which QueryConsumerOffsets without a topic"),
    ("admin1", EVERY_TOPIC_OFFSETS, None),
    ("nothing", ROUTE, None),
    ("broker-a-reg", CONTROLLER_B, "may not register broker 'broker-b'"),
    ("admin1", CONTROLLER_B, None),
])
def test_call_permissions(access_key: str, call: tuple, denial: str | None) -> None:
    name, request = call
    if denial is None:
        check_call(ACL, access_key, name, request)
    else:
        with pytest.raises(AccessDenied, match=denial):
            check_call(ACL, access_key, name, request)


def test_commit_needs_sub_on_every_topic_it_names() -> None:
    request = rmq_pb2.UpdateConsumerOffsetsRequest(consumer_group="etl", offsets=[
        rmq_pb2.ConsumerOffset(topic="orders", queue_id=0, offset=1),
        rmq_pb2.ConsumerOffset(topic="payments", queue_id=0, offset=1),
    ])
    with pytest.raises(AccessDenied, match="lacks SUB on topic 'payments'"):
        check_call(ACL, "subonly", method("MessagingService", "UpdateConsumerOffsets"), request)


def test_calls_naming_a_client_id() -> None:
    assert client_id_of(HEARTBEAT[0], rmq_pb2.HeartbeatRequest(client_id="c1")) == "c1"
    assert client_id_of(LOCK[0], rmq_pb2.LockBatchRequest(client_id="c2")) == "c2"
    assert client_id_of(SEND[0], SEND[1]) is None


def test_an_unknown_method_needs_admin() -> None:
    with pytest.raises(AccessDenied, match="is not an admin account, which /rmq.v1.Other/Thing needs"):
        check_call(ACL, "subonly", "/rmq.v1.Other/Thing", rmq_pb2.ListTopicsRequest())
    check_call(ACL, "admin1", "/rmq.v1.Other/Thing", rmq_pb2.ListTopicsRequest())


def test_viewing_a_message_by_offset_needs_admin() -> None:
    """ViewMessage names only a CommitLog offset: no topic the ACL could check before the read."""
    view = method("AdminService", "ViewMessage")
    request = rmq_pb2.ViewMessageRequest(commit_log_offset=0)
    with pytest.raises(AccessDenied):
        check_call(ACL, "subonly", view, request)
    check_call(ACL, "admin1", view, request)


def test_a_groups_members_need_sub_on_the_group() -> None:
    members = method("AdminService", "GetConsumerConnections")
    check_call(ACL, "subonly", members, rmq_pb2.GetConsumerConnectionsRequest(consumer_group="etl"))
    with pytest.raises(AccessDenied):
        check_call(ACL, "nothing", members, rmq_pb2.GetConsumerConnectionsRequest(consumer_group="etl"))
def test_a_flight_read_needs_what_its_pull_needs() -> None:
    ticket = rmq_pb2.FlightReadTicket(pull=PULL[1], end_offset=10)
    check_call(ACL, "subonly", DO_GET_METHOD, ticket)
    for account in ("pubonly", "nothing"):
        with pytest.raises(AccessDenied):
            check_call(ACL, account, DO_GET_METHOD, ticket)
    other_group = rmq_pb2.FlightReadTicket(pull=rmq_pb2.PullMessageRequest(topic="orders",
                                                                          consumer_group="x"))
    with pytest.raises(AccessDenied):
        check_call(ACL, "subonly", DO_GET_METHOD, other_group)
