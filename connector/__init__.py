"""Clients of the rmq broker: the client SDK (Producer, PushConsumer, PullConsumer; it needs
neither pyspark nor pyarrow) and the Spark data source `rmq` (stream/batch reader and writer).

The SDK's names are imported here; the Spark data source's (`register`, `RmqDataSource`) are
loaded on first use only, so `import rmq.connector` never pulls in Spark or Arrow."""

from __future__ import annotations

import importlib
from typing import Any

from rmq.connector.allocation import AllocateStrategy
from rmq.connector.client import MessageQueue
from rmq.connector.consumer_config import ConsumeFromWhere, ConsumerConfig, MessageModel
from rmq.connector.errors import (
    ConfigError,
    CorruptMessagesError,
    OffsetResolutionError,
    RmqDataLossError,
    RmqError,
    RmqOptionError,
    RmqReadError,
    RmqRefused,
    RmqSinkError,
    RmqUnavailable,
    StateError,
)
from rmq.connector.message import Message, MessageExt
from rmq.connector.message_listener import ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus
from rmq.connector.message_listener_orderly import ConsumeOrderlyContext, ConsumeOrderlyStatus
from rmq.connector.producer import Producer, SendResult, SendStatus, select_message_queue_by_hash
from rmq.connector.pull_consumer import PullConsumer
from rmq.connector.push_consumer import PushConsumer
from rmq.connector.subscription import MessageSelector

__all__ = [
    "AllocateStrategy",
    "ConfigError",
    "ConsumeConcurrentlyContext",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyContext",
    "ConsumeOrderlyStatus",
    "ConsumerConfig",
    "CorruptMessagesError",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "MessageSelector",
    "OffsetResolutionError",
    "Producer",
    "PullConsumer",
    "PushConsumer",
    "RmqDataLossError",
    "RmqError",
    "RmqOptionError",
    "RmqReadError",
    "RmqRefused",
    "RmqSinkError",
    "RmqUnavailable",
    "SendResult",
    "SendStatus",
    "StateError",
    "select_message_queue_by_hash",
]

# The Spark data source, loaded on first use (it imports pyspark and pyarrow).
_SPARK_EXPORTS = {name: "rmq.connector.spark.data_source" for name in ("RmqDataSource", "register")}


def __getattr__(name: str) -> Any:
    module = _SPARK_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rmq.connector' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
