"""AdminBrokerProcessor (RocketMQ's): a queue's offsets (GET_MAX_OFFSET / GET_MIN_OFFSET, rmq.v1
GetTopicOffsets, RocketMQ 5 QueryOffset by policy), SEARCH_OFFSET_BY_TIMESTAMP, the rebalance
locks of ordered consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ), and the administration of the
broker (rmq.v1 AdminService): topics created, grown and deleted (UPDATE_AND_CREATE_TOPIC,
DELETE_TOPIC_IN_BROKER), a message by CommitLog offset (VIEW_MESSAGE_BY_ID), a group's
connections (GET_CONSUMER_CONNECTION_LIST), the consumer groups, a group's consume counters, the
broker's status and its ACL (GET_BROKER_CLUSTER_ACL_INFO).

A topic change is persisted, announced to the name servers at once, and a deleted topic's data,
consumer offsets and held pulls go with it. On a SYNC_MASTER a change is answered once a slave
has it (`BrokerAdmin.topics_changed`; FLUSH_SLAVE_TIMEOUT when none confirmed it in time)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import cast

from rmq import retry
from rmq.broker_server.errors import BrokerError
from rmq.broker_server.long_polling.pull_request_hold_service import PullRequestHoldService
from rmq.broker_server.metrics.broker_stats import BrokerStatsManager, GroupCounters
from rmq.broker_server.offsets.consumer_manager import ConsumerManager
from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager
from rmq.broker_server.offsets.rebalance_lock_manager import RebalanceLockManager
from rmq.broker_server.processors.client_manage_processor import check_client_id
from rmq.broker_server.processors.consumer_manage_processor import check_queue
from rmq.broker_server.processors.names import check_group_name
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.security import caller
from rmq.broker_server.security.acl import Acl, Need, ResourceKind
from rmq.message_queue import MessageQueue
from rmq.store import BrokerRole, MessageStore
from rmq.topic_config import TopicConfig
from rmq.v1 import rmq_pb2


@dataclass(frozen=True, slots=True)
class QueueOffsets:
    queue_id: int
    min_offset: int
    max_offset: int
    last_store_timestamp: int


@dataclass(frozen=True)
class BrokerAdmin:
    """What the administration reaches beyond the store and the managers (BrokerController's):
    the broker's status (role, offsets, replication, version, uptime, today's counts), announcing a
    topic change (to the name servers at once; on a SYNC_MASTER, returning once a slave has it),
    and the ACL in force (None: no ACL)."""

    status: Callable[[], rmq_pb2.BrokerStatusResponse]
    topics_changed: Callable[[], Awaitable[None]]
    acl: Callable[[], Acl | None]


def to_message_queues(queues: Iterable[rmq_pb2.MessageQueue]) -> list[MessageQueue]:
    return [MessageQueue(mq.topic, mq.broker_name, mq.queue_id) for mq in queues]


class AdminBrokerProcessor:
    def __init__(self, store: MessageStore, executor: StoreExecutor, topics: TopicConfigManager,
                 locks: RebalanceLockManager, offsets: ConsumerOffsetManager, consumers: ConsumerManager,
                 hold_service: PullRequestHoldService, stats: BrokerStatsManager,
                 broker: BrokerAdmin) -> None:
        self.store = store
        self.executor = executor
        self.topics = topics
        self.locks = locks
        self.offsets = offsets
        self.consumers = consumers
        self.hold_service = hold_service
        self.stats = stats
        self.broker = broker

    async def topic_offsets(self, topic: str) -> list[QueueOffsets]:
        """Every read queue's offsets and last store time (read on a store thread: the store
        times are read from the CommitLog)."""
        config = self.topics.require(topic)
        return await self.executor.run(self._queue_offsets, config)

    def _queue_offsets(self, config: TopicConfig) -> list[QueueOffsets]:
        topic = config.topic_name
        return [
            QueueOffsets(queue_id, self.store.get_min_offset_in_queue(topic, queue_id),
                         self.store.get_max_offset_in_queue(topic, queue_id),
                         self.store.get_last_store_timestamp(topic, queue_id))
            for queue_id in range(config.read_queue_nums)
        ]

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The queue's first offset (its ConsumeQueue's state: no read, no thread hop)."""
        check_queue(self.topics.require(topic), queue_id)
        return self.store.get_min_offset_in_queue(topic, queue_id)

    def max_offset(self, topic: str, queue_id: int) -> int:
        check_queue(self.topics.require(topic), queue_id)
        return self.store.get_max_offset_in_queue(topic, queue_id)

    async def search_offset(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        check_queue(self.topics.require(topic), queue_id)
        return await self.executor.run(self.store.get_offset_in_queue_by_time, topic, queue_id, timestamp_ms)

    def lock_batch(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> list[MessageQueue]:
        """The queues now locked for the client, in order; none on a slave (spec
        consumer-startup-allocation-ordering §6.2: locks live on the master, so ordered queues
        wait for their master)."""
        check_client_id(client_id)
        check_group_name(group)
        if self.store.config.broker_role is BrokerRole.SLAVE:
            return []
        wanted = list(queues)
        for mq in wanted:   # only real queues take a place in the lock table
            check_queue(self.topics.require(mq.topic), mq.queue_id)
        return sorted(self.locks.try_lock_batch(group, wanted, client_id))

    def unlock_batch(self, group: str, client_id: str, queues: Iterable[MessageQueue]) -> None:
        check_client_id(client_id)
        check_group_name(group)
        self.locks.unlock_batch(group, queues, client_id)

    # -- administration (rmq.v1 AdminService) ----------------------------------------------
    async def create_topic(self, config: TopicConfig) -> None:
        await self.executor.run(self.topics.create, config)
        await self.broker.topics_changed()

    async def update_topic(self, config: TopicConfig) -> None:
        await self.executor.run(self.topics.update, config)
        await self.broker.topics_changed()

    async def delete_topic(self, topic: str) -> None:
        await self.executor.run(self.topics.delete, topic)
        await self.executor.run(self.store.delete_topic, topic)
        self.offsets.remove_topic(topic)
        self.hold_service.wake_topic(topic)
        await self.broker.topics_changed()

    async def view_message(self, commit_log_offset: int) -> bytes:
        """The record stored at a CommitLog offset (`rmq message query --msg-id`)."""
        record = await self.executor.run(self.store.look_message_by_offset, commit_log_offset)
        if record is None:
            raise BrokerError(rmq_pb2.QUERY_NOT_FOUND,
                              f"no message is stored at CommitLog offset {commit_log_offset}")
        return record

    def consumer_connections(self, group: str) -> list[rmq_pb2.ConsumerConnection]:
        """The group's live members here, of every protocol (the one ConsumerManager): rmq.v1 and
        4.x clients from their heartbeats, RocketMQ 5 clients from their Telemetry settings."""
        check_group_name(group)
        return [rmq_pb2.ConsumerConnection(
            client_id=info.client_id, protocol=cast(rmq_pb2.ClientProtocol, info.protocol),
            address=info.address, message_model=cast(rmq_pb2.MessageModel, info.message_model),
            subscriptions=[rmq_pb2.Subscription(topic=topic, sub_expression=expression)
                           for topic, expression in info.subscriptions.items()],
            last_heartbeat_ms=info.last_update_ms) for info in self.consumers.connections(group)]

    def consumer_groups(self) -> set[str]:
        """Every group this broker knows from any source: live members of every protocol (the one
        ConsumerManager), committed offsets, and the retry and dead-letter topics."""
        groups = self.consumers.group_names() | self.offsets.groups()
        groups |= {retry.group_of_copy_topic(config.topic_name) for config in self.topics.all()} - {""}
        return groups

    def visible_consumer_groups(self) -> list[str]:
        """The consumer groups the caller may see (SUB on them), sorted."""
        return sorted(group for group in self.consumer_groups()
                      if caller.may(ResourceKind.GROUP, group, Need.SUB))

    def broker_status(self) -> rmq_pb2.BrokerStatusResponse:
        """Role, CommitLog offsets and replication state of this broker (`rmq broker status`)."""
        return self.broker.status()

    def group_stats(self, group: str) -> dict[str, GroupCounters]:
        """topic → what the group's pulls and receives took from here, and when last (the console's
        consume TPS and last consume time)."""
        check_group_name(group)
        return self.stats.of_group(group)

    def acl(self) -> Acl | None:
        """The ACL in force (None: none), for admins: the adapter shows it without secret keys."""
        return self.broker.acl()
