"""Authentication, permissions and replay defence of rmq.v1 calls against a whole broker in this
process started with an ACL (the accounts of tests/acl_accounts.py): unsigned, wrongly signed
and unknown callers are refused alike, each account does only what its permissions name, a
client id belongs to the account that registered it, a replayed or stale signature is refused,
and no secret appears in a refusal or in anything the broker logged."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import grpc
import pytest

from rmq import request_signing
from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.connector.client import MessageQueue, OutgoingMessage
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from tests.acl_accounts import (
    ADMIN,
    CONSUMER,
    CONSUMER2,
    PRODUCER,
    SECRETS,
    acl_text,
    client,
    refusal,
)
from tests.acl_files import write_acl
from tests.broker_server.in_process_broker import InProcessBroker


class LogText(logging.Handler):
    """Everything logged at INFO or above while it is attached, as the broker process's log
    (`rmq broker` logs at INFO) would hold it."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    directory = tmp_path_factory.mktemp("acl-broker")
    acl = write_acl(directory / "acl.yml", acl_text())
    root = logging.getLogger()
    logged, level = LogText(), root.level
    root.addHandler(logged)
    root.setLevel(logging.INFO)
    broker = InProcessBroker(directory / "store", ServerSecurity(AclFile(acl))).start()
    try:
        with client(broker.address, ADMIN) as admin:
            admin.create_topic("orders", queues=2)
        yield broker
    finally:
        broker.stop()
        root.removeHandler(logged)
        root.setLevel(level)
    assert any("access key" in line for line in logged.lines)   # refusals were logged, and none told a secret
    assert not any(secret in line for line in logged.lines for secret in SECRETS)


# ---------------------------------------------------------------- authentication


def test_no_credentials_are_refused(acl_broker: InProcessBroker) -> None:
    with client(acl_broker.address) as anonymous:
        error = refusal(anonymous.list_topics)
    assert "UNAUTHENTICATED" in str(error) and "request is not signed" in str(error)


def test_wrong_secret_is_refused(acl_broker: InProcessBroker) -> None:
    with client(acl_broker.address, (PRODUCER[0], "not-the-secret")) as impostor:
        error = refusal(lambda: impostor.send("orders", [OutgoingMessage(b"x")]))
    assert "UNAUTHENTICATED" in str(error)
    assert "signature not accepted for access key 'producer1'" in str(error)
    assert "not-the-secret" not in str(error)


def test_unknown_account_gets_the_same_refusal_as_a_wrong_secret(acl_broker: InProcessBroker) -> None:
    """Refusals do not tell which access keys exist."""
    with client(acl_broker.address, ("stranger", "whatever-secret")) as stranger, \
            client(acl_broker.address, ("consumer1", "whatever-secret")) as impostor:
        unknown = str(refusal(stranger.list_topics))
        wrong = str(refusal(impostor.list_topics))
    assert "access key 'stranger': unknown access key or wrong secret key" in unknown
    assert unknown.replace("stranger", "consumer1") == wrong


# ---------------------------------------------------------------- permissions


def test_sub_only_account_can_pull_but_not_send(acl_broker: InProcessBroker) -> None:
    with client(acl_broker.address, PRODUCER) as producer, client(acl_broker.address, CONSUMER) as consumer:
        sent = producer.send("orders", [OutgoingMessage(b"hello", queue_id=0)])
        error = refusal(lambda: consumer.send("orders", [OutgoingMessage(b"nope")]))
        assert error.code == rmq_pb2.NO_PERMISSION   # over the remoting port or gRPC alike
        assert "access key 'consumer1' lacks PUB on topic 'orders'" in str(error)
        mq = MessageQueue("orders", "broker-a", 0)
        pulled = consumer.pull(mq, sent.queue_offsets[0], 32, group="etl")
        assert pulled.messages.count >= 1


def test_pub_only_account_cannot_commit_offsets_for_a_group_it_lacks(acl_broker: InProcessBroker) -> None:
    mq = MessageQueue("orders", "broker-a", 0)
    with client(acl_broker.address, PRODUCER) as producer, client(acl_broker.address, CONSUMER) as consumer:
        error = refusal(lambda: producer.update_consumer_offsets("etl", {mq: 1}))
        assert "PERMISSION_DENIED" in str(error)
        assert "access key 'producer1' lacks SUB on group 'etl'" in str(error)
        error = refusal(lambda: producer.pull(mq, 0, 1, group="etl"))
        assert "lacks SUB on topic 'orders'" in str(error)
        consumer.update_consumer_offsets("etl", {mq: 1})
        assert consumer.query_consumer_offsets("etl", "orders")[mq] == 1


def test_every_topics_offsets_of_a_group_need_an_admin_account(acl_broker: InProcessBroker) -> None:
    """QueryConsumerOffsets without a topic reads every topic's offsets of the group."""
    with client(acl_broker.address, CONSUMER) as consumer, client(acl_broker.address, ADMIN) as admin:
        assert consumer.query_consumer_offsets("etl", "orders") is not None
        error = refusal(lambda: consumer.query_consumer_offsets("etl"))
        assert "PERMISSION_DENIED" in str(error)
        assert "QueryConsumerOffsets without a topic" in str(error)
        admin.query_consumer_offsets("etl")


def test_a_client_id_belongs_to_the_account_that_registered_it(acl_broker: InProcessBroker) -> None:
    mq = MessageQueue("orders", "broker-a", 1)
    with client(acl_broker.address, CONSUMER) as owner, client(acl_broker.address, CONSUMER2) as other:
        owner.heartbeat("etl-client-1", "etl", {"orders": "*"})
        assert owner.lock_batch("etl", "etl-client-1", [mq]) == {mq}
        for call in (lambda: other.unregister("etl-client-1", "etl"),
                     lambda: other.unlock_batch("etl", "etl-client-1", [mq]),
                     lambda: other.heartbeat("etl-client-1", "etl", {"orders": "*"})):
            assert "client id 'etl-client-1' is registered by another account" in str(refusal(call))
        assert owner.consumer_list("etl", "orders") == ["etl-client-1"]
        owner.unlock_batch("etl", "etl-client-1", [mq])
        owner.unregister("etl-client-1", "etl")


def test_admin_operations_need_an_admin_account(acl_broker: InProcessBroker) -> None:
    with client(acl_broker.address, CONSUMER) as consumer:
        error = refusal(lambda: consumer.create_topic("sneaky", queues=1))
    assert "access key 'consumer1' is not an admin account" in str(error)


# ---------------------------------------------------------------- replay


def raw_send(address: str, metadata) -> rmq_pb2.SendMessageResponse:
    request = rmq_pb2.SendMessageRequest(topic="orders", messages=[rmq_pb2.Message(body=b"replay me")])
    with grpc.insecure_channel(address) as channel:
        return rmq_pb2_grpc.MessagingServiceStub(channel).SendMessage(request, metadata=metadata, timeout=5)


def signed_send_metadata(**overrides) -> tuple:
    request = rmq_pb2.SendMessageRequest(topic="orders", messages=[rmq_pb2.Message(body=b"replay me")])
    return request_signing.sign(*PRODUCER, "broker/broker-a", "/rmq.v1.MessagingService/SendMessage", request,
                                **overrides).as_metadata()


def test_replayed_request_is_refused(acl_broker: InProcessBroker) -> None:
    metadata = signed_send_metadata()
    assert raw_send(acl_broker.address, metadata).status.code == rmq_pb2.OK
    with pytest.raises(grpc.RpcError) as raised:
        raw_send(acl_broker.address, metadata)
    assert raised.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "replayed request refused" in raised.value.details()


def test_request_signed_outside_the_time_window_is_refused(acl_broker: InProcessBroker) -> None:
    stale = signed_send_metadata(timestamp_ms=int(time.time() * 1000) - 120_000)
    with pytest.raises(grpc.RpcError) as raised:
        raw_send(acl_broker.address, stale)
    assert raised.value.code() is grpc.StatusCode.UNAUTHENTICATED
    assert "outside the allowed -60 s to +5 s" in raised.value.details()
