"""Clients of the rmq broker: the client SDK (Producer, PushConsumer, PullConsumer; it needs
neither pyspark nor pyarrow) and the Spark data source `rmq` (stream/batch reader and writer).

Every public name is loaded on first use (PEP 562): importing a submodule runs this package's
`__init__` first, and Spark starts a fresh Python process per streaming query that imports
`rmq.connector.spark.data_source`, which needs none of the SDK's producer and consumers (about
0.1 s of CPU per query, bench/NOTES.md "Spark ingest, fourth pass"). The Spark data source's
names (`register`, `RmqDataSource`) are not in `__all__`, so `from rmq.connector import *`
never pulls in Spark or Arrow."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rmq.connector.allocation import AllocateStrategy as AllocateStrategy
    from rmq.connector.client import MessageQueue as MessageQueue
    from rmq.connector.consumer_config import ConsumeFromWhere as ConsumeFromWhere
    from rmq.connector.consumer_config import ConsumerConfig as ConsumerConfig
    from rmq.connector.consumer_config import MessageModel as MessageModel
    from rmq.connector.errors import ConfigError as ConfigError
    from rmq.connector.errors import CorruptMessagesError as CorruptMessagesError
    from rmq.connector.errors import OffsetResolutionError as OffsetResolutionError
    from rmq.connector.errors import RmqDataLossError as RmqDataLossError
    from rmq.connector.errors import RmqError as RmqError
    from rmq.connector.errors import RmqOptionError as RmqOptionError
    from rmq.connector.errors import RmqReadError as RmqReadError
    from rmq.connector.errors import RmqRefused as RmqRefused
    from rmq.connector.errors import RmqSinkError as RmqSinkError
    from rmq.connector.errors import RmqUnavailable as RmqUnavailable
    from rmq.connector.errors import StateError as StateError
    from rmq.connector.message import Message as Message
    from rmq.connector.message import MessageExt as MessageExt
    from rmq.connector.message_listener import ConsumeConcurrentlyContext as ConsumeConcurrentlyContext
    from rmq.connector.message_listener import ConsumeConcurrentlyStatus as ConsumeConcurrentlyStatus
    from rmq.connector.message_listener_orderly import ConsumeOrderlyContext as ConsumeOrderlyContext
    from rmq.connector.message_listener_orderly import ConsumeOrderlyStatus as ConsumeOrderlyStatus
    from rmq.connector.producer import Producer as Producer
    from rmq.connector.producer import SendResult as SendResult
    from rmq.connector.producer import SendStatus as SendStatus
    from rmq.connector.producer import select_message_queue_by_hash as select_message_queue_by_hash
    from rmq.connector.pull_consumer import PullConsumer as PullConsumer
    from rmq.connector.push_consumer import PushConsumer as PushConsumer
    from rmq.connector.spark.data_source import RmqDataSource as RmqDataSource
    from rmq.connector.spark.data_source import register as register
    from rmq.connector.subscription import MessageSelector as MessageSelector

# public name -> the module defining it
_EXPORTS = {
    "AllocateStrategy": "rmq.connector.allocation",
    "MessageQueue": "rmq.connector.client",
    **dict.fromkeys(("ConsumeFromWhere", "ConsumerConfig", "MessageModel"), "rmq.connector.consumer_config"),
    **dict.fromkeys(("ConfigError", "CorruptMessagesError", "OffsetResolutionError", "RmqDataLossError",
                     "RmqError", "RmqOptionError", "RmqReadError", "RmqRefused", "RmqSinkError",
                     "RmqUnavailable", "StateError"), "rmq.connector.errors"),
    **dict.fromkeys(("Message", "MessageExt"), "rmq.connector.message"),
    **dict.fromkeys(("ConsumeConcurrentlyContext", "ConsumeConcurrentlyStatus"),
                    "rmq.connector.message_listener"),
    **dict.fromkeys(("ConsumeOrderlyContext", "ConsumeOrderlyStatus"),
                    "rmq.connector.message_listener_orderly"),
    **dict.fromkeys(("Producer", "SendResult", "SendStatus", "select_message_queue_by_hash"),
                    "rmq.connector.producer"),
    "PullConsumer": "rmq.connector.pull_consumer",
    "PushConsumer": "rmq.connector.push_consumer",
    "MessageSelector": "rmq.connector.subscription",
}
__all__ = sorted(_EXPORTS)

# The Spark data source (it imports pyspark and pyarrow), not part of `import *`.
_EXPORTS.update(dict.fromkeys(("RmqDataSource", "register"), "rmq.connector.spark.data_source"))


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rmq.connector' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value   # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | _EXPORTS.keys())
