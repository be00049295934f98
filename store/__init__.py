"""Storage engine: memory-mapped CommitLog, ConsumeQueues, IndexFile, flush, recovery, retention.
Knows nothing of gRPC or Spark (RocketMQ DefaultMessageStore and its parts)."""

from store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from store.errors import StoreError
from store.message_store import MessageStore
from store.results import (
    DispatchRequest,
    GetMessageResult,
    GetMessageStatus,
    MessageToStore,
    PutMessageResult,
    PutMessageStatus,
)

__all__ = [
    "BrokerRole",
    "DispatchRequest",
    "FlushDiskType",
    "GetMessageResult",
    "GetMessageStatus",
    "MessageStore",
    "MessageStoreConfig",
    "MessageToStore",
    "PutMessageResult",
    "PutMessageStatus",
    "StoreError",
]
