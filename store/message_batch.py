"""MessageBatch: the messages of one put column by column (RocketMQ MessageExtBrokerInner per
column), so that the CommitLog encodes, places and dispatches a batch with array operations
instead of one Python object per message."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from rmq import message_format as mf
from rmq.statuses import PutMessageStatus
from rmq.store.results import EMPTY_HOST, MessageToStore

_Value = TypeVar("_Value")
_Scalar = TypeVar("_Scalar", str, bytes)

IntColumn = int | Sequence[int] | np.ndarray


@dataclass(slots=True)
class MessageBatch:
    """n messages; every column holds one entry per message, in put order."""

    topics: list[str]
    queue_ids: np.ndarray          # int64
    bodies: list[bytes]
    properties: list[bytes]        # each the record's properties field (spec store §3):
                                   # UTF-8 "name\x01value\x02..."
    flags: np.ndarray              # int64
    born_timestamps: np.ndarray    # int64
    born_hosts: list[bytes]        # 8 bytes each: IPv4 address + port
    sys_flags: np.ndarray          # int64
    reconsume_times: np.ndarray    # int64

    def __len__(self) -> int:
        return len(self.bodies)

    @classmethod
    def of(cls, topics: str | list[str], queue_ids: IntColumn, bodies: list[bytes],
           properties: bytes | list[bytes] = b"", *, flags: IntColumn = 0, born_timestamps: IntColumn = 0,
           born_hosts: bytes | list[bytes] = EMPTY_HOST, sys_flags: IntColumn = 0,
           reconsume_times: IntColumn = 0) -> MessageBatch:
        """A batch from columns; a single value stands for the same value in every message."""
        count = len(bodies)

        def same(value: _Scalar | list[_Scalar]) -> list[_Scalar]:
            return [value] * count if isinstance(value, str | bytes) else value

        batch = cls(same(topics), _int_column(queue_ids, count), bodies, same(properties),
                    _int_column(flags, count), _int_column(born_timestamps, count), same(born_hosts),
                    _int_column(sys_flags, count), _int_column(reconsume_times, count))
        lengths = {len(batch.topics), len(batch.queue_ids), len(batch.properties), len(batch.flags),
                   len(batch.born_timestamps), len(batch.born_hosts), len(batch.sys_flags),
                   len(batch.reconsume_times)}
        if lengths != {count}:
            raise ValueError(f"every column must hold {count} entries, one per body")
        return batch

    @classmethod
    def from_messages(cls, messages: Sequence[MessageToStore]) -> MessageBatch | PutMessageStatus:
        """The columns of `messages`; MESSAGE_ILLEGAL when a property name or value holds a
        separator (it would split when the record is read back)."""
        properties = []
        for message in messages:
            encoded = encode_properties(message.properties)
            if encoded is None:
                return PutMessageStatus.MESSAGE_ILLEGAL
            properties.append(encoded)
        return cls.of([m.topic for m in messages], [m.queue_id for m in messages],
                      [m.body for m in messages], properties, flags=[m.flag for m in messages],
                      born_timestamps=[m.born_timestamp for m in messages],
                      born_hosts=[m.born_host for m in messages], sys_flags=[m.sys_flag for m in messages],
                      reconsume_times=[m.reconsume_times for m in messages])


def encode_properties(properties: dict[str, str]) -> bytes | None:
    """The record's properties field, None when a name or value holds \\x01 or \\x02."""
    if not properties:
        return b""
    text = mf.encode_properties(properties)
    count = len(properties)
    if text.count(mf.NAME_VALUE_SEPARATOR) != count or text.count(mf.PROPERTY_SEPARATOR) != count:
        return None
    return text.encode()


def distinct(column: list[_Value]) -> list[_Value]:
    """The distinct values of a column in order of first appearance; a column holding one
    value (the common case) is recognised with one C-level pass."""
    if not column or column.count(column[0]) == len(column):
        return column[:1]
    return list(dict.fromkeys(column))


def _int_column(value: IntColumn, count: int) -> np.ndarray:
    if isinstance(value, int):
        return np.full(count, value, dtype=np.int64)
    return np.asarray(value, dtype=np.int64)


@dataclass(slots=True)
class QueueGroups:
    """Which (topic, queueId) each message of a batch goes to: `index` per message points into
    `queues`, which lists each queue once (by topic in order of first appearance, then by queue
    id). `order` lists the messages queue by queue, in put order within each queue (None when
    the batch goes to one queue: put order itself); the run of queue n is
    order[bounds[n]:bounds[n + 1]]."""

    index: np.ndarray              # int64, one per message
    queues: list[tuple[str, int]]
    order: np.ndarray | None       # int64, one per message
    bounds: np.ndarray             # int64, len(queues) + 1 run boundaries in `order`

    @classmethod
    def of(cls, topics: list[str], queue_ids: np.ndarray) -> QueueGroups:
        count = len(queue_ids)
        if count == 1:   # the latency path: no numpy comparisons for one message
            return cls(np.zeros(1, dtype=np.int64), [(topics[0], int(queue_ids[0]))], None, np.array([0, 1]))
        names = distinct(topics)
        if len(names) == 1:
            keys = queue_ids
        else:
            position = {name: i for i, name in enumerate(names)}
            keys = (np.fromiter(map(position.__getitem__, topics), np.int64, count) << 32) | queue_ids
        if count == 0 or (keys == keys[0]).all():
            key = int(keys[0]) if count else 0
            queues = [(names[key >> 32], key & 0xFFFFFFFF)] if count else []
            return cls(np.zeros(count, dtype=np.int64), queues, None, np.array([0, count]))
        order = np.argsort(keys, kind="stable")
        sorted_keys = keys[order]
        starts = np.flatnonzero(sorted_keys[1:] != sorted_keys[:-1]) + 1
        bounds = np.concatenate(([0], starts, [count]))
        index = np.empty(count, dtype=np.int64)
        index[order] = np.repeat(np.arange(len(starts) + 1), np.diff(bounds))
        queues = [(names[key >> 32], key & 0xFFFFFFFF) for key in sorted_keys[bounds[:-1]].tolist()]
        return cls(index, queues, order, bounds)

    def positions_in_queue(self, counted: np.ndarray) -> np.ndarray:
        """Per message, how many `counted` messages of its queue precede it in the batch."""
        counted = counted.astype(np.int64)
        if self.order is None:
            first: np.ndarray = np.cumsum(counted) - counted
            return first
        sorted_counted = counted[self.order]
        before: np.ndarray = np.cumsum(sorted_counted) - sorted_counted
        result = np.empty_like(before)
        result[self.order] = before - np.repeat(before[self.bounds[:-1]], np.diff(self.bounds))
        return result

    def counts(self, counted: np.ndarray) -> np.ndarray:
        """Per queue, how many `counted` messages it received."""
        return np.bincount(self.index, weights=counted, minlength=len(self.queues)).astype(np.int64)
