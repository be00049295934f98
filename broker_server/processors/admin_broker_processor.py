"""AdminBrokerProcessor (RocketMQ's): a queue's offsets (GET_MAX_OFFSET / GET_MIN_OFFSET, rmq.v1
GetTopicOffsets, RocketMQ 5 QueryOffset by policy), SEARCH_OFFSET_BY_TIMESTAMP, and the
rebalance locks of ordered consumers (LOCK_BATCH_MQ / UNLOCK_BATCH_MQ)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rmq.broker_server.offsets.rebalance_lock_manager import RebalanceLockManager
from rmq.broker_server.processors.client_manage_processor import check_client_id
from rmq.broker_server.processors.consumer_manage_processor import check_queue
from rmq.broker_server.processors.names import check_group_name
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
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


def to_message_queues(queues: Iterable[rmq_pb2.MessageQueue]) -> list[MessageQueue]:
    return [MessageQueue(mq.topic, mq.broker_name, mq.queue_id) for mq in queues]


class AdminBrokerProcessor:
    def __init__(self, store: MessageStore, executor: StoreExecutor, topics: TopicConfigManager,
                 locks: RebalanceLockManager) -> None:
        self.store = store
        self.executor = executor
        self.topics = topics
        self.locks = locks

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
