"""ClientManageProcessor (RocketMQ's): heartbeats and unregistrations of every protocol's
consumers into the one ConsumerManager, producers' heartbeats into the ProducerManager (and the
producer connections of a group, `GetProducerConnections`), and CHECK_CLIENT_CONFIG's subscription
check."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import cast

from rmq.broker_server.errors import BrokerError, illegal_argument
from rmq.broker_server.offsets.consumer_manager import ConsumerManager
from rmq.broker_server.offsets.producer_manager import ProducerInfo, ProducerManager
from rmq.broker_server.processors.consumer_send_msg_back import ensure_retry_topic
from rmq.broker_server.processors.names import check_group_name
from rmq.broker_server.processors.pull_message_processor import MAX_SUB_EXPRESSION_LENGTH
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.sql92 import Sql92Error, compile_sql92
from rmq.v1 import rmq_pb2


def check_client_id(client_id: str) -> None:
    if not client_id:
        raise illegal_argument("client_id is empty")


class ClientManageProcessor:
    def __init__(self, topics: TopicConfigManager, consumers: ConsumerManager,
                 on_topics_changed: Callable[[], None], producers: ProducerManager) -> None:
        self.topics = topics
        self.consumers = consumers
        self.on_topics_changed = on_topics_changed
        self.producers = producers

    def producer_heartbeat(self, group: str, client_id: str, protocol: int, address: str, language: str,
                           version: int) -> None:
        """A producer's heartbeat in its producer group (BrokerError past the table's bounds)."""
        check_client_id(client_id)
        check_group_name(group)
        self.producers.register(group, ProducerInfo(client_id, protocol, address, language, version,
                                                    self.producers.now_ms()))

    def producer_left(self, group: str, client_id: str) -> None:
        self.producers.unregister(group, client_id)

    def producer_connections(self, group: str) -> list[rmq_pb2.ProducerConnection]:
        check_group_name(group)
        return [rmq_pb2.ProducerConnection(
            client_id=info.client_id, protocol=cast(rmq_pb2.ClientProtocol, info.protocol),
            address=info.address,
            language=info.language, version=info.version, last_heartbeat_ms=info.last_update_ms)
            for info in self.producers.connections(group)]

    def heartbeat(self, client_id: str, group: str, message_model: int, subscriptions: Mapping[str, str],
                  protocol: int, address: str) -> None:
        """A consumer's heartbeat: registered or refreshed in its group (BrokerError when a
        field is bad or the consumer table's bounds do not admit it)."""
        check_client_id(client_id)
        check_group_name(group)
        if message_model not in rmq_pb2.MessageModel.values():
            raise illegal_argument(f"message_model {message_model} is not CLUSTERING or BROADCASTING")
        for topic, expression in subscriptions.items():
            if len(expression) > MAX_SUB_EXPRESSION_LENGTH:
                raise illegal_argument(f"sub_expression of {topic!r} is longer than "
                                       f"{MAX_SUB_EXPRESSION_LENGTH} characters")
        if message_model == rmq_pb2.CLUSTERING and self.consumers.admits_group(group):
            # ClientManageProcessor#heartBeat: the group's retry topic exists before any retry
            # (a group too long to prefix has none: its send-backs are refused TOPIC_ILLEGAL).
            # Only for a group the consumer table admits, so max_consumer_groups also bounds the
            # retry topics heartbeats create.
            with contextlib.suppress(BrokerError):
                ensure_retry_topic(self.topics, group, self.on_topics_changed)
        self.consumers.heartbeat(client_id, group, message_model, dict(subscriptions), protocol=protocol,
                                 address=address)

    def unregister(self, client_id: str, group: str) -> None:
        check_client_id(client_id)
        check_group_name(group)
        self.consumers.unregister(client_id, group)

    @staticmethod
    def check_sql92(expression: str) -> None:
        """CHECK_CLIENT_CONFIG: SUBSCRIPTION_PARSE_FAILED for a SQL92 filter that does not compile."""
        try:
            compile_sql92(expression)
        except Sql92Error as error:
            raise BrokerError(rmq_pb2.SUBSCRIPTION_PARSE_FAILED, str(error)) from None
