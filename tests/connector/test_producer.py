"""Producer without a broker: the hash selector's routing (spec consumer-pull-rebalance
TV-21) and bad input refused before anything is sent."""

from __future__ import annotations

from typing import cast

import pytest

from rmq.connector.client import (
    MAX_SEND_REQUEST_BYTES,
    MessageQueue,
    OutgoingMessage,
    QueueData,
    RmqClient,
    TopicRoute,
)
from rmq.connector.client import SendResult as ClientSendResult
from rmq.connector.errors import RmqUnavailable
from rmq.connector.message import Message
from rmq.connector.producer import Producer, select_message_queue_by_hash
from rmq.v1 import rmq_pb2

QUEUES = [MessageQueue("TopicTestjjj", "broker-a", i) for i in range(10)]
TAGS = ["TagA", "TagB", "TagC", "TagD", "TagE"]


def test_tv21_order_id_routing() -> None:
    for i in range(100):
        message = Message("TopicTestjjj", f"Hello RocketMQ {i}".encode(), tags=TAGS[i % 5], keys=f"KEY{i}")
        assert select_message_queue_by_hash(QUEUES, message, i % 10).queue_id == i % 10


def test_string_keys_use_java_string_hash_and_stay_put() -> None:
    message = Message("T", b"x", keys="customer-42")
    chosen = select_message_queue_by_hash(QUEUES, message, None)
    # Java: Math.abs("customer-42".hashCode()) % 10
    java_hash = 0
    for ch in "customer-42":
        java_hash = (java_hash * 31 + ord(ch)) & 0xFFFFFFFF
    java_hash = java_hash - (1 << 32) if java_hash & 0x80000000 else java_hash
    assert chosen.queue_id == abs(java_hash) % 10
    assert select_message_queue_by_hash(QUEUES, message, "customer-42") == chosen


@pytest.mark.parametrize(
    ("message", "words"),
    [
        (Message("", b"x"), "no topic"),
        (Message("T", b""), "body is empty"),
        (Message("T", b"x" * 101), "101 bytes, the maximum is 100"),
        (Message("T", b"x", delay_level=-1), "delay_level"),
    ],
)
def test_bad_messages_fail_before_any_send(message: Message, words: str) -> None:
    producer = Producer("127.0.0.1:1", max_message_size=100)
    producer.start()   # no connection is made until a send
    try:
        with pytest.raises(ValueError, match=words):
            producer.send(message)
        with pytest.raises(ValueError, match=words):
            producer.send([Message("T", b"fine"), message])
    finally:
        producer.shutdown()


def test_send_before_start_is_refused() -> None:
    with pytest.raises(RuntimeError, match="not started"):
        Producer("127.0.0.1:1").send(Message("T", b"x"))


class TwoBrokers:
    """A client stub: topic T on broker-a and broker-b; records which broker each send went to."""

    route_of_t = TopicRoute("T", {"broker-a": "127.0.0.1:1", "broker-b": "127.0.0.1:2"},
                            (QueueData("broker-a", 4, 4, 6), QueueData("broker-b", 4, 4, 6)), ())

    def __init__(self) -> None:
        self.sent_to: list[str] = []

    def route(self, topic: str) -> TopicRoute:
        return self.route_of_t

    def send(self, topic: str, messages: list[OutgoingMessage], broker_name: str) -> ClientSendResult:
        self.sent_to.append(broker_name)
        return ClientSendResult(["id"], [0], [0], broker_name)

    max_request_bytes = MAX_SEND_REQUEST_BYTES
    column_requests = RmqClient.column_requests   # the real encoding (a list is sent as MessageColumns)

    def send_requests(self, topic: str, requests: list[rmq_pb2.SendMessageRequest],
                      broker_name: str) -> ClientSendResult:
        """send() of the bodies the requests carry."""
        bodies = []
        for request in requests:
            columns, start = request.columns, 0
            for length in columns.body_lengths:
                bodies.append(OutgoingMessage(columns.bodies[start:start + length]))
                start += length
        return self.send(topic, bodies, broker_name)


def test_short_lived_producers_spread_over_the_brokers() -> None:
    """Each fresh producer starts its round-robin at random (sendWhichQueue): 40 one-message
    producers all landing on one of two brokers has a chance of 2 in 2**40."""
    first_brokers = set()
    for _ in range(40):
        client = TwoBrokers()
        with Producer("127.0.0.1:1", client=cast(RmqClient, client)) as producer:
            producer.send(Message("T", b"x"))
            producer.send(Message("T", b"y"))
        assert len(set(client.sent_to)) == 2   # then round-robin
        first_brokers.add(client.sent_to[0])
    assert first_brokers == {"broker-a", "broker-b"}

    picked = set()
    for _ in range(40):
        with RmqClient("127.0.0.1:1") as rmq_client:
            rmq_client._route = TwoBrokers().route   # type: ignore[method-assign]
            picked.add(rmq_client._pick_broker("T"))
    assert picked == {"broker-a", "broker-b"}


class CountingQueues(TwoBrokers):
    """A client stub storing message i of each send in queue i % 3 at offset 100 + i."""

    def send(self, topic: str, messages: list[OutgoingMessage], broker_name: str) -> ClientSendResult:
        self.sent_to.append(topic)
        ids = [f"{topic}-{m.body.decode()}" for m in messages]
        return ClientSendResult(ids, [i % 3 for i in range(len(ids))], [100 + i for i in range(len(ids))],
                                broker_name)


def test_a_list_answers_one_result_per_message_in_order() -> None:
    client = CountingQueues()
    with Producer("127.0.0.1:1", client=cast(RmqClient, client)) as producer:
        one_topic = producer.send([Message("T", str(i).encode()) for i in range(5)])
        two_topics = producer.send([Message("T", b"a"), Message("U", b"b"), Message("T", b"c")])
    assert [(r.msg_id, r.message_queue.queue_id, r.queue_offset) for r in one_topic] == [
        ("T-0", 0, 100), ("T-1", 1, 101), ("T-2", 2, 102), ("T-3", 0, 103), ("T-4", 1, 104)]
    assert [(r.msg_id, r.message_queue.topic, r.queue_offset) for r in two_topics] == [
        ("T-a", "T", 100), ("U-b", "U", 100), ("T-c", "T", 101)]



class FirstBrokerDown(CountingQueues):
    """The first send fails as unreachable; records what each send carried and where it went."""

    def __init__(self) -> None:
        super().__init__()
        self.encoded = 0
        self.carried: list[list[rmq_pb2.SendMessageRequest]] = []
        self.brokers: list[str] = []

    def column_requests(self, topic: str, bodies: list[bytes], tags: list[str], keys: list[str]
                        ) -> list[rmq_pb2.SendMessageRequest]:
        self.encoded += 1
        return super().column_requests(topic, bodies, tags, keys)

    def send_requests(self, topic: str, requests: list[rmq_pb2.SendMessageRequest],
                      broker_name: str) -> ClientSendResult:
        self.carried.append(requests)
        self.brokers.append(broker_name)
        if len(self.carried) == 1:
            raise RmqUnavailable("UNAVAILABLE: connection refused", broker=broker_name)
        return super().send_requests(topic, requests, broker_name)


def test_a_list_is_encoded_once_and_resent_as_it_is_on_another_broker() -> None:
    client = FirstBrokerDown()
    with Producer("127.0.0.1:1", client=cast(RmqClient, client)) as producer:
        results = producer.send([Message("T", str(i).encode(), keys=["k", str(i)]) for i in range(4)])
    assert [(r.msg_id, r.message_queue.broker_name, r.queue_offset) for r in results] == [
        (f"T-{i}", client.brokers[1], 100 + i) for i in range(4)]
    assert client.brokers[0] != client.brokers[1]   # moved to the other broker
    assert client.encoded == 1 and client.carried[0] is client.carried[1]
    assert list(client.carried[0][0].columns.keys) == [f"k {i}" for i in range(4)]
