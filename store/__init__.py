"""Storage engine: memory-mapped CommitLog, ConsumeQueues, IndexFile, flush, recovery, retention.
Knows nothing of gRPC or Spark (RocketMQ DefaultMessageStore and its parts)."""

from rmq.statuses import GetMessageStatus, PutMessageStatus
from rmq.store.commit_log import OneRecord
from rmq.store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from rmq.store.errors import StoreError
from rmq.store.message_batch import MessageBatch
from rmq.store.message_store import MessageStore
from rmq.store.results import (
    DispatchRequest,
    GetMessageResult,
    MessageToStore,
    PutBatchResult,
    PutMessageResult,
)

__all__ = [
    "BrokerRole",
    "DispatchRequest",
    "FlushDiskType",
    "GetMessageResult",
    "GetMessageStatus",
    "MessageBatch",
    "MessageStore",
    "MessageStoreConfig",
    "MessageToStore",
    "OneRecord",
    "PutBatchResult",
    "PutMessageResult",
    "PutMessageStatus",
    "StoreError",
]
