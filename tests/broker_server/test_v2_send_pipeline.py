"""RocketMQ 5 sends go through the broker's one send pipeline (SendMessageProcessor), like rmq.v1
and 4.x remoting sends: a slave refuses them with the protocol's not-master status, and they count
in the per-topic metrics; a RocketMQ 5 move to the DLQ goes through the one send-back
(ConsumerSendMsgBackProcessor) and counts like an rmq.v1 one."""

from __future__ import annotations

from pathlib import Path

import grpc

from rmq.broker_server.processors.topic_config_manager import TopicConfig
from rmq.rocketmq_v2 import MessagingServiceStub
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
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
