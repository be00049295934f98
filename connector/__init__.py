"""Clients of the rmq broker: the client SDK (Producer, PushConsumer; importable without
pyspark) and the Spark data source `rmq` (stream/batch reader and writer). Every name is
loaded lazily on first use, so executors, the CLI and SDK services import only what they use
and never pull in Spark unless they use it."""

from __future__ import annotations

import importlib
from typing import Any

# exported name -> module that defines it
_EXPORTS = {
    "RmqDataSource": "rmq.connector.spark.data_source",
    "register": "rmq.connector.spark.data_source",
    "Producer": "rmq.connector.producer",
    "SendResult": "rmq.connector.producer",
    "SendStatus": "rmq.connector.producer",
    "select_message_queue_by_hash": "rmq.connector.producer",
    "PushConsumer": "rmq.connector.push_consumer",
    "PullConsumer": "rmq.connector.pull_consumer",
    "ConsumeOrderlyStatus": "rmq.connector.message_listener_orderly",
    "ConsumeOrderlyContext": "rmq.connector.message_listener_orderly",
    "Message": "rmq.connector.message",
    "MessageExt": "rmq.connector.message",
    "ConsumeConcurrentlyStatus": "rmq.connector.message_listener",
    "ConsumeConcurrentlyContext": "rmq.connector.message_listener",
    "MessageQueue": "rmq.connector.client",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rmq.connector' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
