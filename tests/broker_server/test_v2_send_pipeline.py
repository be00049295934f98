"""RocketMQ 5 sends go through the broker's one send pipeline (SendMessageProcessor), like rmq.v1
and 4.x remoting sends: a slave refuses them with the protocol's not-master status, and they count
in the per-topic metrics; a RocketMQ 5 move to the DLQ goes through the one send-back
(ConsumerSendMsgBackProcessor) and counts like an rmq.v1 one."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from rmq import message_format as mf
from rmq.broker_server.processors.topic_config_manager import TopicConfig
from rmq.rocketmq_v2 import MessagingServiceStub
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from rmq.stored_message import decode_records
from tests.broker_server.in_process_broker import InProcessBroker, running_broker
from tests.broker_server.test_rocketmq5_metrics import scrape, value
from tests.broker_server.v2_calls import V2Client

CLIENT = (("x-mq-client-id", "v2-send-pipeline"),)


def send(broker: InProcessBroker, topic: str, bodies: list[bytes]) -> pb.SendMessageResponse:
    messages = []
    for index, body in enumerate(bodies):
        message = v2.Message(topic=v2.Resource(name=topic), body=body)
        message.system_properties.message_id = f"01PIPELINE{index:04d}"
        message.system_properties.message_type = v2.NORMAL
        messages.append(message)
    with grpc.insecure_channel(broker.address) as channel:
        return MessagingServiceStub(channel).SendMessage(pb.SendMessageRequest(messages=messages),
                                                         metadata=CLIENT, timeout=10)


def test_a_slave_refuses_a_v2_send_as_forbidden_naming_its_role(tmp_path: Path) -> None:
    with running_broker(tmp_path, broker_role="SLAVE", broker_id=1, master="127.0.0.1:1") as slave:
        slave.controller.topics.create(TopicConfig("T", 1, 1))
        response = send(slave, "T", [b"x"])
        assert response.status.code == v2.FORBIDDEN, response.status
        assert "SLAVE (read-only)" in response.status.message
        assert slave.controller.store.get_commit_log_max_offset() == 0


def test_v2_sends_count_in_the_per_topic_metrics(tmp_path: Path) -> None:
    with running_broker(tmp_path) as broker:
        broker.controller.topics.create(TopicConfig("Orders", 2, 2))
        assert send(broker, "Orders", [b"x" * 10, b"y" * 10, b"z" * 10]).status.code == v2.OK
        samples = scrape(broker.controller.metrics_figures())
        assert value(samples, "rocketmq_messages_in_total", topic="Orders", message_type="normal") == 3
        assert value(samples, "rocketmq_throughput_in_total", topic="Orders", message_type="normal") == 30


def test_a_v2_move_to_the_dead_letter_queue_counts_in_the_metrics(tmp_path: Path) -> None:
    with running_broker(tmp_path) as broker:
        broker.controller.topics.create(TopicConfig("Orders", 1, 1))
        assert send(broker, "Orders", [b"poison"]).status.code == v2.OK
        with grpc.insecure_channel(broker.address) as channel:
            consumer = V2Client(channel, "v2-dlq")
            [message] = consumer.receive("g", "Orders", wait_ms=5_000)
            assert consumer.forward_to_dlq("g", message) == v2.OK
        samples = scrape(broker.controller.metrics_figures())
        assert value(samples, "rocketmq_send_to_dlq_messages_total", topic="Orders", consumer_group="g") == 1
        assert broker.controller.store.get_max_offset_in_queue("%DLQ%g", 0) == 1


def one(topic: str, body: bytes, message_id: str, **system: object) -> pb.SendMessageRequest:
    message = v2.Message(topic=v2.Resource(name=topic), body=body)
    message.system_properties.message_id = message_id
    for name, given in system.items():
        if name == "keys":
            message.system_properties.keys.extend(given)   # type: ignore[call-overload]
        elif name == "delivery_ms":
            message.system_properties.delivery_timestamp.FromMilliseconds(given)   # type: ignore[arg-type]
        else:
            setattr(message.system_properties, name, given)
    return pb.SendMessageRequest(messages=[message])


def test_a_single_v2_send_takes_the_single_message_path_with_its_fields_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One message (normal, FIFO or DELAY) is stored by SendMessageProcessor.send_one, as a
    single rmq.v1 or remoting send is; a batch or a transaction message by put_records. The
    record keeps the producer's id, tag and keys; a FIFO message goes to its group's queue; a
    DELAY message is parked in the timer and answered with its recall handle."""
    with running_broker(tmp_path) as broker:
        broker.controller.topics.create(TopicConfig("Orders", 4, 4))
        sender = broker.controller.processors.send
        general: list[int] = []
        put_records = sender.put_records

        async def counted(topic: str, records: list[Any]) -> Any:
            general.append(len(records))
            return await put_records(topic, records)
        monkeypatch.setattr(sender, "put_records", counted)
        with grpc.insecure_channel(broker.address) as channel:
            stub = MessagingServiceStub(channel)

            def call(request: pb.SendMessageRequest) -> pb.SendMessageResponse:
                return stub.SendMessage(request, metadata=CLIENT, timeout=10)
            plain = call(one("Orders", b"plain", "01ONE0001", tag="TagA", keys=["k1", "k2"]))
            fifo = call(one("Orders", b"fifo", "01ONE0002", message_type=v2.FIFO, message_group="g7"))
            delayed = call(one("Orders", b"later", "01ONE0003", message_type=v2.DELAY,
                               delivery_ms=int(time.time() * 1000) + 600_000))
            assert general == []
            assert send(broker, "Orders", [b"a", b"b"]).status.code == v2.OK
            assert general == [2]
            transaction = V2Client(channel, "v2-send-pipeline").send_transaction("Orders", b"t", "01ONE0004")
            assert transaction.status.code == v2.OK and general == [2, 1]
        assert [r.status.code for r in (plain, fifo, delayed)] == [v2.OK] * 3
        assert [e.message_id for r in (plain, fifo, delayed) for e in r.entries] == \
            ["01ONE0001", "01ONE0002", "01ONE0003"]
        assert delayed.entries[0].offset == -1 and delayed.entries[0].recall_handle
        assert not plain.entries[0].recall_handle
        store = broker.controller.store
        reads = [store.get_message("check", "Orders", queue, 0, 10) for queue in range(4)]
        stored = {message.properties[mf.PROPERTY_UNIQ_KEY]: message for read in reads
                  for message in decode_records(read.buffer, read.sizes.tolist())}
        assert stored["01ONE0001"].properties[mf.PROPERTY_TAGS] == "TagA"
        assert stored["01ONE0001"].properties[mf.PROPERTY_KEYS] == "k1 k2"
        assert stored["01ONE0002"].queue_id == (mf.tags_hash_code("g7") & 0x7FFFFFFF) % 4
        assert "01ONE0003" not in stored   # parked in the timer until it is due


def test_a_single_v2_send_is_refused_topic_first_then_message_with_nothing_stored(tmp_path: Path) -> None:
    """On the single-message path the topic is checked before the message (a missing topic is
    named even for an empty body), and each bad message gets its own RocketMQ 5 code."""
    with running_broker(tmp_path) as broker:
        broker.controller.topics.create(TopicConfig("Orders", 1, 1))
        with grpc.insecure_channel(broker.address) as channel:
            stub = MessagingServiceStub(channel)

            def code(request: pb.SendMessageRequest) -> int:
                return int(stub.SendMessage(request, metadata=CLIENT, timeout=10).status.code)
            assert code(one("Missing", b"", "01BAD0001")) == v2.TOPIC_NOT_FOUND
            assert code(one("Orders", b"", "01BAD0002")) == v2.MESSAGE_BODY_EMPTY
            assert code(one("Orders", b"x", "")) == v2.ILLEGAL_MESSAGE_ID
            assert code(one("Orders", b"x", "01BAD0003", tag="a|b")) == v2.ILLEGAL_MESSAGE_TAG
            assert code(one("Orders", b"x", "01BAD0004", keys=["a b"])) == v2.ILLEGAL_MESSAGE_KEY
            assert code(one("Orders", b"x", "01BAD0005", message_type=v2.FIFO)) == v2.ILLEGAL_MESSAGE_GROUP
            assert code(one("Orders", b"x", "01BAD0006", message_type=v2.DELAY)) == v2.ILLEGAL_DELIVERY_TIME
            assert code(one("Orders", b"x", "01BAD0007", tag="a\x01b")) == v2.ILLEGAL_MESSAGE_PROPERTY_KEY
        assert broker.controller.store.get_commit_log_max_offset() == 0
