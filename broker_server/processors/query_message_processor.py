"""QueryMessageProcessor (RocketMQ's): messages of a topic by key (KEYS or UNIQ_KEY) within a
time range, from the index (rmq.v1 QueryMessageByKey; the admin's query by key)."""

from __future__ import annotations

import time

from rmq.broker_server.errors import illegal_argument
from rmq.broker_server.processors.consumer_send_msg_back import copies_the_caller_may_read
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.store import GetMessageResult, MessageStore

QUERY_MESSAGE_MAX = 64  # RocketMQ maxMsgsNumBatch


class QueryMessageProcessor:
    def __init__(self, store: MessageStore, executor: StoreExecutor, topics: TopicConfigManager) -> None:
        self.store = store
        self.executor = executor
        self.topics = topics

    async def query_by_key(self, topic: str, key: str, max_messages: int, begin_ms: int, end_ms: int
                           ) -> GetMessageResult:
        """At most QUERY_MESSAGE_MAX messages; end_ms 0 means now. A retry or dead-letter copy is
        answered only to a caller who may read its original topic (authorization follows the
        record)."""
        self.topics.require(topic)
        if not key:
            raise illegal_argument("key is empty")
        if max_messages <= 0:
            raise illegal_argument(f"max_messages must be positive, not {max_messages}")
        result = await self.executor.run(self.store.query_message_by_key, topic, key,
                                         min(max_messages, QUERY_MESSAGE_MAX), begin_ms,
                                         end_ms or int(time.time() * 1000))
        return copies_the_caller_may_read(topic, result)
