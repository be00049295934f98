"""Per-group settings (RocketMQ's SubscriptionGroupConfig, updateSubGroup) on a real in-process
broker: stored durably, enforced (consume disabled: the group's pulls are answered NO_PERMISSION;
retry_max_times decides when a sent-back message goes to the DLQ), changed by admins only and read
by the accounts allowed on the group."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq import retry
from rmq.connector.admin import GroupSettings, MQAdmin
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.errors import RmqError
from rmq.connector.message import decode_messages
from rmq.v1 import rmq_pb2
from tests.broker_server import acl_broker
from tests.broker_server.in_process_broker import running_broker

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
    finally:
        broker.stop()
