"""ali-ons (npm, a pure JavaScript RocketMQ 4.x client nobody here wrote) against a broker's
remoting port: its producer's messages are read by the rmq SDK with tags, keys and properties,
its push consumer reads them and what the SDK sent, a message it fails once comes back through
the retry topic, and the offsets it commits show in `rmq group progress`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.broker_server.processors.topic_config_manager import TopicConfig
from rmq.connector.client import OutgoingMessage, RmqClient
from tests.broker_server.ali_ons_runner import ali_ons_problem, run_ali_ons
from tests.broker_server.in_process_broker import InProcessBroker, start_remoting_broker
from tests.broker_server.test_remoting_cpp_client import (
    FAST_RETRY_LEVELS,
    QUEUES,
    group_progress,
    sdk_messages,
)

pytestmark = pytest.mark.skipif(ali_ons_problem() is not None, reason=str(ali_ons_problem()))
TOPIC = "ali"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    broker = start_remoting_broker(tmp_path / "store", message_delay_level=FAST_RETRY_LEVELS)
    broker.controller.topics.create(TopicConfig(TOPIC, QUEUES, QUEUES))
    yield broker
    broker.stop()


def test_ali_ons_producer_and_consumer_interoperate_with_the_sdk(broker: InProcessBroker) -> None:
    address = broker.config.remoting_listen
    specs = [
        {"body": "ali-0", "tags": "t0", "keys": "k0", "properties": {"color": "red"}},
        {"body": "ali-1", "tags": "t1", "keys": "fail-once"},
    ]
    produced = run_ali_ons(do="produce", address=address, topic=TOPIC, group="ali-pg", messages=specs)
    assert produced["ok"], produced
    by_body = {row["body"].decode(): row for row in sdk_messages(broker, TOPIC)}
    assert (
        by_body["ali-0"]["tags"],
        by_body["ali-0"]["keys"],
        dict(by_body["ali-0"]["properties"])["color"],
    ) == ("t0", "k0", "red")
    assert by_body["ali-0"]["msg_id"] == produced["sent"][0]["msg_id"]
    sdk = RmqClient(broker.address)
    try:
        sdk.send(
            TOPIC, [OutgoingMessage(b"from-sdk", tags="sdk", keys="sdk-key", properties={"color": "blue"})]
        )
    finally:
        sdk.close()

    consumed = run_ali_ons(
        do="consume", address=address, topic=TOPIC, group="ali-cg", expect=3, fail_once_key="fail-once"
    )["received"]
    by_body = {message["body"]: message for message in consumed}
    assert set(by_body) == {"ali-0", "ali-1", "from-sdk"}
    assert (by_body["from-sdk"]["tags"], by_body["from-sdk"]["keys"], by_body["from-sdk"]["color"]) == (
        "sdk",
        "sdk-key",
        "blue",
    )
    assert by_body["ali-1"]["reconsume_times"] == 1 and by_body["ali-1"]["topic"] == TOPIC  # retried
    queues = [row for row in group_progress(broker, "ali-cg")["queues"] if row["topic"] == TOPIC]
    assert len(queues) == QUEUES and all(row["consumer_offset"] == row["max_offset"] for row in queues)
