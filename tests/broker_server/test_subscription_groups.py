"""Per-group settings (RocketMQ's SubscriptionGroupConfig, updateSubGroup) on a real in-process
broker: stored durably, enforced (consume disabled: the group's pulls are answered NO_PERMISSION;
retry_max_times decides when a sent-back message goes to the DLQ), changed by admins only and read
by the accounts allowed on the group."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from rmq import retry
from rmq.connector.admin import GroupSettings, MQAdmin
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.errors import RmqError
from rmq.connector.message import decode_messages
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from rmq.v1 import rmq_pb2
from tests.broker_server import acl_broker
from tests.broker_server.in_process_broker import InProcessBroker, running_broker
from tests.broker_server.v2_calls import V2Client
from tests.clocks import ManualClock

MQ = MessageQueue("Orders", "broker-a", 0)


def test_a_disabled_group_is_refused_its_pulls_until_enabled_and_the_setting_survives_a_restart(
        tmp_path: Path) -> None:
    with running_broker(tmp_path) as broker, RmqClient(broker.address) as client:
        client.create_topic("Orders", queues=1)
        client.send("Orders", [OutgoingMessage(b"x", queue_id=0)])
        admin = MQAdmin(client)
        assert admin.group_settings("g1") == {"broker-a": GroupSettings(True, 16, stored=False)}
        admin.update_group_settings("g1", consume_enable=False)
        with pytest.raises(RmqError, match="subscription group no permission, g1") as refused:
            client.pull(MQ, 0, 1, group="g1")
        assert refused.value.code == rmq_pb2.NO_PERMISSION
        assert client.pull(MQ, 0, 1, group="g2").messages     # another group is not touched
    with running_broker(tmp_path) as broker, RmqClient(broker.address) as client:
        admin = MQAdmin(client)
        assert admin.group_settings("g1") == {"broker-a": GroupSettings(False, 16, stored=True)}
        with pytest.raises(RmqError, match="no permission"):
            client.pull(MQ, 0, 1, group="g1")
        admin.update_group_settings("g1", consume_enable=True)
        assert client.pull(MQ, 0, 1, group="g1").messages


def test_the_group_s_retry_max_times_decides_when_a_sent_back_message_goes_to_the_dlq(tmp_path: Path) -> None:
    with running_broker(tmp_path) as broker, RmqClient(broker.address) as client:
        client.create_topic("Orders", queues=1)
        client.send("Orders", [OutgoingMessage(b"x", queue_id=0)])
        client.heartbeat("c1", "g1", {"Orders": "*"})
        [message] = decode_messages(client.pull(MQ, 0, 1, group="g1").messages, MQ)
        first = client.send_message_back("g1", "broker-a", message.commit_log_offset, max_reconsume_times=16)
        assert first.topic == retry.retry_topic("g1")
        MQAdmin(client).update_group_settings("g1", retry_max_times=0)   # the client's 16 no longer decides
        again = client.send_message_back("g1", "broker-a", message.commit_log_offset, max_reconsume_times=16)
        assert again.topic == retry.dlq_topic("g1")
        with pytest.raises(RmqError, match="retry_max_times must be 0-1000, not 1001"):
            MQAdmin(client).update_group_settings("g1", retry_max_times=1001)


def test_rocketmq5_receives_refuse_a_disabled_group_and_follow_the_group_s_retry_max_times(
        tmp_path: Path) -> None:
    """RocketMQ 5 (PopMessageProcessor, proxy): a disabled group's ReceiveMessage is FORBIDDEN; a
    group whose retry_max_times is 0 gets one delivery, the next goes to its DLQ, while a group
    without settings gets the message again."""
    clock = ManualClock()     # the test moves the broker's time past the invisibility
    broker = InProcessBroker(tmp_path, clock=clock).start()
    try:
        with RmqClient(broker.address) as client:
            client.create_topic("Orders", queues=1)
            client.send("Orders", [OutgoingMessage(b"x", queue_id=0)])
            admin = MQAdmin(client)
            admin.update_group_settings("off", consume_enable=False)
            admin.update_group_settings("once", retry_max_times=0)
        with grpc.insecure_channel(broker.address) as channel:
            consumer = V2Client(channel, "v5-consumer")
            [status] = [r.status for r in consumer.stub.ReceiveMessage(pb.ReceiveMessageRequest(
                group=v2.Resource(name="off"), batch_size=1,
                message_queue=v2.MessageQueue(topic=v2.Resource(name="Orders"), id=-1)),
                metadata=consumer.metadata, timeout=10) if r.HasField("status")]
            assert status.code == v2.FORBIDDEN
            assert "subscription group no permission, off" in status.message
            for group in ("once", "default"):
                [first] = consumer.receive(group, "Orders")
                assert first.system_properties.delivery_attempt == 1
            clock.advance(11)     # past both deliveries' 10 s invisibility
            assert consumer.receive("once", "Orders") == []
            assert broker.controller.store.get_max_offset_in_queue(retry.dlq_topic("once"), 0) == 1
            [again] = consumer.receive("default", "Orders")
            assert again.system_properties.delivery_attempt == 2
    finally:
        broker.stop()


def test_deleting_a_group_forgets_its_stored_settings_for_good(tmp_path: Path) -> None:
    """`rmq group delete` (RocketMQ deleteSubGroup) removes the group's subscriptionGroup.json
    entry: its consumption is allowed again, after a restart too; other groups keep theirs."""
    with running_broker(tmp_path) as broker, RmqClient(broker.address) as client:
        client.create_topic("Orders", queues=1)
        client.send("Orders", [OutgoingMessage(b"x", queue_id=0)])
        admin = MQAdmin(client)
        admin.update_group_settings("g1", consume_enable=False)
        admin.update_group_settings("g2", retry_max_times=3)
        admin.delete_group("g1")
        assert admin.group_settings("g1") == {"broker-a": GroupSettings(True, 16, stored=False)}
        assert client.pull(MQ, 0, 1, group="g1").messages
        assert not client.delete_subscription_group("broker-a", "g1")    # nothing stored any more
    with running_broker(tmp_path) as broker, RmqClient(broker.address) as client:
        admin = MQAdmin(client)
        assert admin.group_settings("g1") == {"broker-a": GroupSettings(True, 16, stored=False)}
        assert admin.group_settings("g2") == {"broker-a": GroupSettings(True, 3, stored=True)}


def test_only_admins_change_settings_and_the_group_s_accounts_read_them(tmp_path: Path) -> None:
    broker = acl_broker.acl_broker(tmp_path)
    try:
        with (acl_broker.client(broker, "consumer") as consumer, acl_broker.client(broker, "admin1") as admin,
              acl_broker.client(broker, "stranger") as stranger):
            with pytest.raises(RmqError, match="PERMISSION_DENIED.*UpdateSubscriptionGroup"):
                MQAdmin(consumer).update_group_settings("g", consume_enable=False)
            assert MQAdmin(consumer).group_settings("g")["broker-a"].consume_enable
            with pytest.raises(RmqError, match="PERMISSION_DENIED.*lacks SUB on group 'g'"):
                MQAdmin(stranger).group_settings("g")
            MQAdmin(admin).update_group_settings("g", consume_enable=False)
            disabled = {"broker-a": GroupSettings(False, 16, stored=True)}
            assert MQAdmin(consumer).group_settings("g") == disabled
            with pytest.raises(RmqError, match="PERMISSION_DENIED.*DeleteSubscriptionGroup"):
                consumer.delete_subscription_group("broker-a", "g")
            assert MQAdmin(consumer).group_settings("g") == disabled
    finally:
        broker.stop()
