"""Store inputs, outputs and statuses (RocketMQ MessageExtBrokerInner, PutMessageResult,
GetMessageResult, DispatchRequest)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from rmq.record_columns import RecordColumns
from rmq.statuses import GetMessageStatus, PutMessageStatus
from rmq.stored_message import StoredMessage

EMPTY_HOST = bytes(8)


@dataclass(frozen=True)
class MessageToStore:
    """One message to append (RocketMQ MessageExtBrokerInner)."""

    topic: str
    queue_id: int
    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = EMPTY_HOST
    sys_flag: int = 0
    reconsume_times: int = 0

    @classmethod
    def copy_of(cls, message: StoredMessage, topic: str, queue_id: int, properties: dict[str, str],
                reconsume_times: int) -> MessageToStore:
        """A stored message appended again elsewhere (a retry copy, a delayed message restored to
        its real topic): body, flag, born time and host and sys flag carried over."""
        return cls(topic=topic, queue_id=queue_id, body=message.body, properties=properties,
                   flag=message.flag, born_timestamp=message.born_timestamp, born_host=message.born_host,
                   sys_flag=message.sys_flag, reconsume_times=reconsume_times)


@dataclass
class PutMessageResult:
    status: PutMessageStatus
    msg_id: str = ""
    queue_id: int = 0
    queue_offset: int = -1
    physical_offset: int = -1
    store_timestamp: int = 0

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK


_NO_OFFSETS = np.zeros(0, dtype=np.int64)


@dataclass
class PutBatchResult:
    """The result of put_batch for the whole batch: a batch is stored whole or refused whole,
    so one status; the offsets columns hold one entry per message (empty when refused)."""

    status: PutMessageStatus
    queue_offsets: np.ndarray = field(default_factory=lambda: _NO_OFFSETS)      # int64
    physical_offsets: np.ndarray = field(default_factory=lambda: _NO_OFFSETS)   # int64
    store_timestamp: int = 0
    store_host: bytes = EMPTY_HOST

    @property
    def ok(self) -> bool:
        return self.status is PutMessageStatus.PUT_OK

    def msg_ids(self) -> list[str]:
        """Each message's id (rmq.message_format.message_id), encoded for the batch at once."""
        count, host = len(self.physical_offsets), len(self.store_host)
        ids = np.empty((count, host + 8), dtype=np.uint8)
        ids[:, :host] = np.frombuffer(self.store_host, dtype=np.uint8)
        ids[:, host:] = self.physical_offsets.astype(">i8").view(np.uint8).reshape(count, 8)
        text, width = ids.tobytes().hex().upper(), 2 * (host + 8)
        return [text[start:start + width] for start in range(0, width * count, width)]


_NO_SIZES = np.zeros(0, dtype=np.int32)


@dataclass
class GetMessageResult:
    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    message_count: int = 0
    sizes: np.ndarray = field(default_factory=lambda: _NO_SIZES)   # int32, one per message
    # the records back to back; a memoryview of the copy when the read gathered interleaved records
    buffer: bytes | memoryview = b""
    suggest_pulling_from_slave: bool = False
    # instead of `buffer`, when the read asked for the records column-wise (get_queue_range)
    columns: RecordColumns | None = None

    @property
    def byte_count(self) -> int:
        """The bytes the answer holds (records, or their columns)."""
        return len(self.buffer) if self.columns is None else self.columns.byte_count


class DispatchRequest(NamedTuple):
    """One CommitLog record as seen by the dispatchers (spec store §8). Immutable; a
    NamedTuple rather than a frozen dataclass because one is built per dispatched message."""

    topic: str
    queue_id: int
    commit_log_offset: int
    msg_size: int
    tags_code: int
    store_timestamp: int
    consume_queue_offset: int
    keys: str
    uniq_key: str
    sys_flag: int = 0
