"""The SDK's hot path over the broker's remoting port (docs/client-behaviour.md "Transport"):
a single-message send and the PushConsumer's held pulls go over it when the route advertises it,
with the ACL (rmq signing, replays refused), TLS, bounded held pulls, and a lost push (a pull
answer that never arrives) still delivered by the next pull from the offsets."""

from __future__ import annotations

import queue
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq import message_format as mf
from rmq.broker_server.processors.topic_config_manager import TopicConfig
from rmq.broker_server.remoting import remoting_server
from rmq.broker_server.remoting.broker_processor import PULL_RESPONSE_CODES
from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.broker_server.security.tls import ServerTls
from rmq.connector import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer, remoting_client
from rmq.connector.client import OutgoingMessage, PullResult, RmqClient
from rmq.connector.errors import RmqError, RmqUnavailable
from rmq.connector.message import decode_messages
from rmq.connector.remoting_client import RemotingCall, RemotingConnection
from rmq.message_queue import MessageQueue
from rmq.remoting.remoting_command import LENGTH, RemotingCommand, decode
from rmq.remoting.request_code import RequestCode, ResponseCode
from rmq.v1 import rmq_pb2
from tests.acl_files import write_acl
from tests.broker_server.in_process_broker import InProcessBroker
from tests.tls_certs import make_tls_files
from tests.waiting import WAIT_S, wait_until

TOPIC = "fast-t"
GROUP = "fast-g"
MAX_HELD_PULLS = 2
ACL = """accounts:
  - {accessKey: producer, secretKey: 'producer-secret', topicPerms: ['fast-t=PUB']}
  - {accessKey: consumer, secretKey: 'consumer-secret', topicPerms: ['fast-t=SUB'],
     groupPerms: ['fast-g=SUB']}
"""


def start(store: Path, **settings: object) -> InProcessBroker:
    broker = InProcessBroker(store, **settings).start()
    broker.controller.topics.create(TopicConfig(TOPIC, 2, 2))
    return broker


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    broker = start(tmp_path / "store")
    yield broker
    broker.stop()


@pytest.fixture
def bounded_broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    broker = start(tmp_path / "store", max_held_pulls=MAX_HELD_PULLS)
    yield broker
    broker.stop()


def remoting_used(client: RmqClient, broker: InProcessBroker) -> bool:
    """The client holds an open connection to the broker's remoting port."""
    connections = client._remoting._connections
    return any(not c.closed for a, c in connections.items() if a == broker.config.remoting_listen)


class Received:
    def __init__(self) -> None:
        self.bodies: queue.SimpleQueue[bytes] = queue.SimpleQueue()

    def __call__(self, messages: list, context: object) -> ConsumeConcurrentlyStatus:
        for message in messages:
            self.bodies.put(message.body)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def next(self) -> bytes:
        return self.bodies.get(timeout=WAIT_S)


def started_consumer(address: str, client: RmqClient, listener: Received) -> PushConsumer:
    consumer = PushConsumer(GROUP, address, consume_from="first", client=client)
    consumer.subscribe(TOPIC)
    consumer.register_message_listener(listener)
    consumer.start()
    return consumer


def test_a_send_and_its_push_delivery_go_over_the_remoting_port(broker: InProcessBroker) -> None:
    producer_client, consumer_client = RmqClient(broker.address), RmqClient(broker.address)
    producer = Producer(broker.address, client=producer_client)
    producer.start()
    received = Received()
    consumer = started_consumer(broker.address, consumer_client, received)
    try:
        result = producer.send(Message(TOPIC, b"first", tags="A", keys="k1", properties={"p": "v"}))
        assert received.next() == b"first"
        assert remoting_used(producer_client, broker) and remoting_used(consumer_client, broker)
        mq = result.message_queue
        pulled = consumer_client.pull(mq, result.queue_offset, 1, group="reader")   # over gRPC
        assert pulled.messages.count == 1
        for body in (b"second", b"third"):
            producer.send(Message(TOPIC, body))
        assert {received.next(), received.next()} == {b"second", b"third"}
    finally:
        consumer.shutdown()
        producer.shutdown()
        producer_client.close()
        consumer_client.close()


def test_a_fresh_push_consumer_holds_one_pull_per_queue_it_owns(tmp_path: Path) -> None:
    """Each owned queue, the group's retry queue among them, is pulled once from its start: with
    the hold table just large enough for them, none is refused (a second pull of the first queue
    at offset 0 would be, and retried only 3 s later)."""
    owned = {f"{TOPIC}@0", f"{TOPIC}@1", f"%RETRY%{GROUP}@0"}
    broker = start(tmp_path / "store", max_held_pulls=len(owned))
    hold = broker.controller.hold_service
    received = Received()
    with RmqClient(broker.address) as client:
        consumer = started_consumer(broker.address, client, received)
        try:
            wait_until(lambda: hold.held_count() == len(owned), "a pull held on every owned queue")
            assert {key: len(requests) for key, requests in hold._table.items()} == dict.fromkeys(owned, 1)
            assert hold.held_count() == len(owned)   # nothing more arrived meanwhile
            Producer(broker.address, client=client).send(Message(TOPIC, b"woken"))
            assert received.next() == b"woken"
        finally:
            consumer.shutdown()
            broker.stop()


def test_a_broker_whose_remoting_port_is_unreachable_is_sent_to_over_grpc(broker: InProcessBroker) -> None:
    assert broker.controller.remoting is not None
    broker.run(broker.controller.remoting.stop())
    with RmqClient(broker.address) as client:
        producer = Producer(broker.address, client=client)
        producer.start()
        result = producer.send(Message(TOPIC, b"over grpc"))
        assert not remoting_used(client, broker)
        pulled = client.pull(result.message_queue, result.queue_offset, 1, group=GROUP)
        assert pulled.messages.count == 1


@pytest.mark.parametrize("over_remoting", [True, False])
def test_a_single_message_keeps_its_fields_over_either_port(broker: InProcessBroker,
                                                            over_remoting: bool) -> None:
    """A one-message send travels to the remoting port as it is (no protobuf request) and is
    built as a SendMessageRequest only for gRPC: tags, keys, properties, the chosen queue and
    the flag arrive either way, as they do for a one-message protobuf request."""
    if not over_remoting:
        assert broker.controller.remoting is not None
        broker.run(broker.controller.remoting.stop())
    with RmqClient(broker.address) as client:
        one = OutgoingMessage(b"fields", "TagA", "k1 k2", {"p": "v"}, queue_id=1, flag=7)
        sent = client.send(TOPIC, [one])
        proto = rmq_pb2.Message(body=b"proto", queue_id=0, flag=9)
        request = rmq_pb2.SendMessageRequest(topic=TOPIC, messages=[proto])
        sent_proto = client.send_requests(TOPIC, [request])
        assert remoting_used(client, broker) is over_remoting
        assert (sent.queue_ids, sent_proto.queue_ids) == ([1], [0])
        got = {}
        for result, queue_id in ((sent, 1), (sent_proto, 0)):
            mq = MessageQueue(TOPIC, result.broker_name, queue_id)
            pulled = client.pull(mq, result.queue_offsets[0], 1, group=GROUP)
            [message] = decode_messages(pulled.messages, mq)
            flag = mf.HEADER.unpack_from(pulled.messages.records)[4]
            got[message.body] = (message.tags, message.keys, message.properties.get("p"), flag)
        assert got == {b"fields": ("TagA", "k1 k2", "v", 7), b"proto": ("", "", None, 9)}


def test_the_acl_applies_and_a_replayed_request_is_refused(tmp_path: Path) -> None:
    security = ServerSecurity(acl_file=AclFile(write_acl(tmp_path / "acl.yml", ACL)))
    broker = start(tmp_path / "store", security=security)
    frames: list[bytes] = []
    original = RemotingConnection._write

    def recording(self: RemotingConnection, command: RemotingCommand) -> None:
        frames.append(command.encode())
        original(self, command)

    try:
        with (RmqClient(broker.address, access_key="consumer", secret_key="consumer-secret") as reader,
              RmqClient(broker.address, access_key="producer", secret_key="producer-secret") as writer):
            with pytest.raises(RmqError) as refused:
                Producer(broker.address, client=reader).send(Message(TOPIC, b"not allowed"))
            assert refused.value.code == rmq_pb2.NO_PERMISSION and "PUB" in refused.value.message
            assert remoting_used(reader, broker)
            RemotingConnection._write = recording   # type: ignore[method-assign]
            try:
                result = Producer(broker.address, client=writer).send(Message(TOPIC, b"allowed"))
            finally:
                RemotingConnection._write = original   # type: ignore[method-assign]
            assert remoting_used(writer, broker) and len(frames) == 1
            replayed = raw_call(broker.config.remoting_listen, frames[0])
            assert replayed.code == ResponseCode.NO_PERMISSION and "replayed" in (replayed.remark or "")
            pulled = reader.pull(result.message_queue, result.queue_offset, 32, group=GROUP)
            assert pulled.messages.count == 1     # the replay stored nothing
    finally:
        broker.stop()


def raw_call(address: str, frame: bytes) -> RemotingCommand:
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as connection:
        connection.sendall(frame)
        prefix = connection.recv(4, socket.MSG_WAITALL)
        if len(prefix) < 4:
            raise ConnectionError("the broker closed the connection without an answer")
        length = LENGTH.unpack(prefix)[0]
        return decode(connection.recv(length, socket.MSG_WAITALL))


def test_tls_applies_to_the_remoting_port(tmp_path: Path) -> None:
    tls = make_tls_files(tmp_path / "tls")
    security = ServerSecurity(tls=ServerTls(tls.server_cert, tls.server_key))
    broker = start(tmp_path / "store", security=security)
    try:
        with (RmqClient(broker.address, tls_ca_file=str(tls.ca)) as producer_client,
              RmqClient(broker.address, tls_ca_file=str(tls.ca)) as consumer_client):
            received = Received()
            consumer = started_consumer(broker.address, consumer_client, received)
            try:
                Producer(broker.address, client=producer_client).send(Message(TOPIC, b"over tls"))
                assert received.next() == b"over tls"
            finally:
                consumer.shutdown()
            assert remoting_used(producer_client, broker) and remoting_used(consumer_client, broker)
        plaintext = RemotingCommand(RequestCode.GET_MAX_OFFSET, ext_fields={"topic": TOPIC, "queueId": "0"})
        with pytest.raises(ConnectionError):
            raw_call(broker.config.remoting_listen, plaintext.encode())
    finally:
        broker.stop()


def test_a_lost_push_is_delivered_by_the_next_pull(broker: InProcessBroker, monkeypatch) -> None:
    """The broker's answer to a held pull (the push of the new message) is lost with its
    connection; the consumer pulls again from its offset and gets the message."""
    dropped: list[remoting_server.Channel] = []
    original = remoting_server.Channel.write_frame     # every answer leaves through it

    def losing_first_push(self: remoting_server.Channel, command: RemotingCommand) -> bool:
        if not dropped and command.is_response and command.body:
            self.transport.abort()    # the answer never leaves: the connection drops
            dropped.append(self)
            return True
        return original(self, command)

    monkeypatch.setattr(remoting_server.Channel, "write_frame", losing_first_push)
    with RmqClient(broker.address) as producer_client, RmqClient(broker.address) as consumer_client:
        received = Received()
        consumer = started_consumer(broker.address, consumer_client, received)
        try:
            wait_until(lambda: held_pulls(broker) >= 2, "the consumer holds a pull on each queue")
            Producer(broker.address, client=producer_client).send(Message(TOPIC, b"pushed once"))
            assert received.next() == b"pushed once"
            assert dropped and dropped[0].closed   # delivered after the drop, not by a pull's timeout
        finally:
            consumer.shutdown()


Answers = queue.SimpleQueue[tuple[int, PullResult | None, RmqError | None]]


def held_pull(client: RmqClient, broker: InProcessBroker, queue_id: int, answers: Answers,
              n: int) -> RemotingCall | object:
    """A pull held for 60 s on one queue from offset 0; its answer goes to `answers` as number n."""
    mq = MessageQueue(TOPIC, broker.config.broker_name, queue_id)
    return client.pull_async(mq, 0, 32, group=GROUP, suspend_timeout_ms=60_000,
                             callback=lambda result, error: answers.put((n, result, error)))


def held_pulls(broker: InProcessBroker) -> int:
    return broker.controller.hold_service.held_count()


def test_held_pulls_are_bounded_and_a_cancelled_one_is_let_go(bounded_broker: InProcessBroker) -> None:
    broker = bounded_broker
    answers: Answers = queue.SimpleQueue()
    with RmqClient(broker.address) as client:
        calls = [held_pull(client, broker, queue_id, answers, n) for n, queue_id in enumerate((0, 1, 0))]
        n, _, error = answers.get(timeout=WAIT_S)
        assert n == 2 and error is not None and error.code == rmq_pb2.LIMIT_EXCEEDED
        assert "max_held_pulls" in error.message
        assert remoting_used(client, broker)
        wait_until(lambda: held_pulls(broker) == MAX_HELD_PULLS, "both admitted pulls held")
        calls[0].cancel()
        n, _, error = answers.get(timeout=WAIT_S)
        assert n == 0 and error is not None and "cancelled" in error.message
        wait_until(lambda: held_pulls(broker) == 1, "the broker let the cancelled pull go")
        calls.append(held_pull(client, broker, 0, answers, 3))
        wait_until(lambda: held_pulls(broker) == MAX_HELD_PULLS, "a new pull admitted in its place")
        assert answers.empty()
        for call in calls[1:]:
            call.cancel()


def test_calls_past_the_in_flight_bound_of_a_connection_go_over_grpc(broker: InProcessBroker,
                                                                     monkeypatch) -> None:
    """The broker stops reading a connection with 1024 requests in progress, which would hold
    back every send behind them: the SDK keeps fewer in flight and sends the rest over gRPC."""
    monkeypatch.setattr(remoting_client, "MAX_IN_FLIGHT", 1)
    remoting = broker.controller.remoting
    assert remoting is not None
    with RmqClient(broker.address) as client:
        answers: Answers = queue.SimpleQueue()
        calls = [held_pull(client, broker, queue_id, answers, queue_id) for queue_id in (0, 1)]
        wait_until(lambda: held_pulls(broker) == 2, "both pulls held")
        assert sum(len(channel.requests) for channel in remoting.channels) == 1   # one over the remoting port
        result = Producer(broker.address, client=client).send(Message(TOPIC, b"past the bound"))
        assert result.queue_offset == 0
        for call in calls:
            call.cancel()


def test_a_member_whose_server_id_changed_is_signed_for_by_the_id_it_names(tmp_path: Path) -> None:
    """A member signing for another id than its route suggests (a slave the controller made
    master keeps the id it started with) refuses the first request, naming its id; the SDK signs
    for that id from then on, as it learns it over gRPC."""
    security = ServerSecurity(acl_file=AclFile(write_acl(tmp_path / "acl.yml", ACL)))
    broker = start(tmp_path / "store", security=security)
    processor = broker.controller.remoting.processor   # type: ignore[union-attr]
    processor.dispatcher.authenticator._rmq_signing.server_id = "broker/broker-a/7"
    answers: Answers = queue.SimpleQueue()
    try:
        with (RmqClient(broker.address, access_key="producer", secret_key="producer-secret") as writer,
              RmqClient(broker.address, access_key="consumer", secret_key="consumer-secret") as reader):
            result = Producer(broker.address, client=writer).send(Message(TOPIC, b"signed again"))
            assert remoting_used(writer, broker) and writer._remoting._server_ids == {
                broker.config.remoting_listen: "broker/broker-a/7"}
            held_pull(reader, broker, result.message_queue.queue_id, answers, 0)
            n, pulled, error = answers.get(timeout=WAIT_S)
            assert error is None and pulled is not None and pulled.messages.count == 1
            assert remoting_used(reader, broker)
    finally:
        broker.stop()


def test_a_call_unanswered_past_its_deadline_fails(broker: InProcessBroker) -> None:
    """A pull the broker holds past the call's deadline (hold time + timeout in RmqClient) is
    failed by the client, as a gRPC deadline would: the consumer then pulls again."""
    failures: queue.SimpleQueue[RmqError | None] = queue.SimpleQueue()
    with RmqClient(broker.address, timeout=1.0) as client:
        target = remoting_client.RemotingTarget(broker.config.remoting_listen, "broker/broker-a", "broker-a")
        mq = MessageQueue(TOPIC, "broker-a", 0)
        pull = remoting_client.PullSpec.of(mq, 0, 32, GROUP, "*", 60_000, commit_offset=None)
        client._remoting.pull_async(target, pull, 0.2, lambda response, error: failures.put(error))
        failure = failures.get(timeout=WAIT_S)
        assert isinstance(failure, RmqUnavailable) and "no answer" in failure.message


@pytest.mark.parametrize(("pull_status", "code"), sorted(PULL_RESPONSE_CODES.items()))
def test_a_pull_answer_reads_back_as_the_status_the_broker_answered(pull_status: int, code: int) -> None:
    """The remoting answer becomes the PullResult straight from the frame: the broker's
    response code for each pull status reads back as that status, with the offsets and the
    suggested member; any other code is the refusal's Status."""
    fields = {"nextBeginOffset": "5", "minOffset": "1", "maxOffset": "9", "suggestWhichBrokerId": "1"}
    result = remoting_client.pull_answer(RemotingCommand(code, flag=1, ext_fields=fields))
    assert isinstance(result, PullResult)
    assert (result.pull_status, result.next_begin_offset, result.min_offset, result.max_offset,
            result.suggest_which_broker_id, result.messages.count) == (pull_status, 5, 1, 9, 1, 0)
    refusal = remoting_client.pull_answer(RemotingCommand(ResponseCode.NO_PERMISSION, flag=1, remark="no"))
    assert refusal == rmq_pb2.Status(code=rmq_pb2.NO_PERMISSION, message="no")
