"""Authorization follows the data a request touches, not only the names it carries
(docs/security-model.md): an in-process `--acl` broker (tests/broker_server/acl_broker.py) and
accounts that may consume `orders` in group `g`, publish it, or nothing at all."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from rmq.broker_server.names import SCHEDULE_TOPIC
from rmq.connector.client import OutgoingMessage
from rmq.connector.errors import RmqError
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.v1 import rmq_pb2
from tests.broker_server.acl_broker import acl_broker, client
from tests.broker_server.in_process_broker import InProcessBroker
from tests.broker_server.v2_calls import V2Client

RETRY_LEVEL_3_QUEUE = 2    # a first send-back waits at delay level 3: schedule queue 2


def commit_log_offset(msg_id: str) -> int:
    return int(msg_id[-16:], 16)   # an offset message id ends with the record's CommitLog offset


def test_send_back_refuses_the_offset_of_a_record_in_a_topic_the_caller_may_not_consume(tmp_path: Path):
    """#25 item 1: SUB on the group is not SUB on whatever topic the offset points into."""
    broker = acl_broker(tmp_path)
    try:
        with client(broker, "admin1") as admin:
            admin.create_topic("orders", queues=1)
            admin.create_topic("secret", queues=1)
        with client(broker, "producer") as producer:
            secret = producer.send("secret", [OutgoingMessage(b"classified")]).msg_ids[0]
            order = producer.send("orders", [OutgoingMessage(b"order")]).msg_ids[0]
        name = broker.config.broker_name
        with client(broker, "consumer") as consumer:
            consumer.heartbeat("consumer-1", "g", {"orders": "*"})
            with pytest.raises(RmqError) as refused:
                consumer.send_message_back("g", name, commit_log_offset(secret))
            assert refused.value.code == rmq_pb2.NO_PERMISSION
            assert "secret" not in refused.value.message and "classified" not in refused.value.message
            assert consumer.send_message_back("g", name, commit_log_offset(order)).topic == "%RETRY%g"
        assert broker.controller.store.get_max_offset_in_queue(SCHEDULE_TOPIC, RETRY_LEVEL_3_QUEUE) == 1
    finally:
        broker.stop()


def produce_orders(broker: InProcessBroker, count: int) -> None:
    with client(broker, "admin1") as admin:
        admin.create_topic("orders", queues=1)
    with client(broker, "producer") as producer:
        producer.send("orders", [OutgoingMessage(b"order-%d" % n) for n in range(count)])


def test_consumer_rpcs_need_sub_and_a_refused_one_leaves_the_delivery_in_flight(tmp_path: Path):
    """#26 item 2: AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue and
    UpdateOffset from an account without SUB (the producer, holding the consumer's handle)
    are refused; the message stays the consumer's and comes back when its invisibility ends."""
    broker = acl_broker(tmp_path)
    try:
        produce_orders(broker, 1)
        with grpc.insecure_channel(broker.address) as channel:
            consumer = V2Client(channel, "consumer-1", "consumer")
            producer = V2Client(channel, "producer-1", "producer")
            [message] = consumer.receive("g", "orders")
            assert producer.ack("g", message) == v2.FORBIDDEN
            assert producer.change_invisible("g", message, 0).status.code == v2.FORBIDDEN
            assert producer.forward_to_dlq("g", message) == v2.FORBIDDEN
            assert producer.update_offset("g", message, 1) == v2.FORBIDDEN
            assert consumer.receive("g", "orders") == []    # still invisible: nothing was acknowledged
            assert consumer.change_invisible("g", message, 0).status.code == v2.OK   # its invisibility ends
            [again] = consumer.receive("g", "orders")
            assert (again.body, again.system_properties.delivery_attempt) == (b"order-0", 2)
        assert broker.controller.topics.get("%DLQ%g") is None
    finally:
        broker.stop()


def test_a_client_id_belongs_to_its_account_so_another_cannot_end_its_session(tmp_path: Path):
    """#25 item 8: NotifyClientTermination naming another account's client id is refused, and
    that client's auto-renewed deliveries stay in flight."""
    broker = acl_broker(tmp_path)
    try:
        produce_orders(broker, 1)
        with grpc.insecure_channel(broker.address) as channel:
            consumer = V2Client(channel, "consumer-1", "consumer")
            impostor = V2Client(channel, "consumer-1", "prying")   # SUB on g too, another account
            [held] = consumer.receive("g", "orders", auto_renew=True)
            assert impostor.notify_termination("g") == v2.FORBIDDEN
            assert impostor.heartbeat("g") == v2.FORBIDDEN
            assert V2Client(channel, "prying-1", "prying").receive("g", "orders") == []
            assert consumer.ack("g", held) == v2.OK
            assert consumer.notify_termination("g") == v2.OK
    finally:
        broker.stop()
