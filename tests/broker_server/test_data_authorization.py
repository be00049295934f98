"""Authorization follows the data a request touches, not only the names it carries
(docs/security-model.md): an in-process `--acl` broker (tests/broker_server/acl_broker.py) and
accounts that may consume `orders` in group `g`, publish it, or nothing at all."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq.broker_server.names import SCHEDULE_TOPIC
from rmq.connector.client import OutgoingMessage
from rmq.connector.errors import RmqError
from rmq.v1 import rmq_pb2
from tests.broker_server.acl_broker import acl_broker, client

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
