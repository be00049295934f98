"""DispatchBatch: consecutive CommitLog records as the dispatchers see them (spec store §8),
column by column: what DispatchRequest holds for one record, for a whole chunk."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rmq import message_format as mf
from rmq.store.message_batch import QueueGroups, distinct
from rmq.store.results import DispatchRequest


@dataclass(slots=True)
class DispatchBatch:
    topics: list[str]
    queue_ids: np.ndarray               # int64 columns, one entry per record
    commit_log_offsets: np.ndarray
    msg_sizes: np.ndarray
    tags_codes: np.ndarray
    store_timestamps: np.ndarray
    consume_queue_offsets: np.ndarray
    sys_flags: np.ndarray
    keys: list[str]
    uniq_keys: list[str]
    queues: QueueGroups

    def __len__(self) -> int:
        return len(self.topics)

    def request(self, index: int) -> DispatchRequest:
        return DispatchRequest(
            self.topics[index], int(self.queue_ids[index]), int(self.commit_log_offsets[index]),
            int(self.msg_sizes[index]), int(self.tags_codes[index]), int(self.store_timestamps[index]),
            int(self.consume_queue_offsets[index]), self.keys[index], self.uniq_keys[index],
            int(self.sys_flags[index]))

    def requests(self) -> list[DispatchRequest]:
        return [self.request(index) for index in range(len(self))]

    @classmethod
    def from_requests(cls, requests: Sequence[DispatchRequest]) -> DispatchBatch:
        (topics, queue_ids, offsets, sizes, tags_codes, timestamps, cq_offsets, keys, uniq_keys,
         sys_flags) = map(list, zip(*requests, strict=True))
        ids = np.array(queue_ids, dtype=np.int64)
        return cls(topics, ids, _ints(offsets), _ints(sizes), _ints(tags_codes), _ints(timestamps),
                   _ints(cq_offsets), _ints(sys_flags), keys, uniq_keys, QueueGroups.of(topics, ids))

    @classmethod
    def of_properties(cls, topics: list[str], queue_ids: np.ndarray, commit_log_offsets: np.ndarray,
                      msg_sizes: np.ndarray, store_timestamp: int, consume_queue_offsets: np.ndarray,
                      sys_flags: np.ndarray, properties: list[bytes], queues: QueueGroups) -> DispatchBatch:
        """The batch for records just appended: tags code, keys and unique key come from each
        record's properties field, read once per distinct value."""
        count = len(topics)
        infos = {data: dispatch_properties(data) for data in distinct(properties)}
        if len(infos) == 1:
            (tags_code, keys, uniq_key), = infos.values()
            tags_codes = np.full(count, tags_code, dtype=np.int64)
            key_column, uniq_column = [keys] * count, [uniq_key] * count
        else:
            per_record = [infos[data] for data in properties]
            tags_codes = np.fromiter((info[0] for info in per_record), np.int64, count)
            key_column = [info[1] for info in per_record]
            uniq_column = [info[2] for info in per_record]
        return cls(topics, queue_ids, commit_log_offsets, msg_sizes, tags_codes,
                   np.full(count, store_timestamp, dtype=np.int64), consume_queue_offsets, sys_flags,
                   key_column, uniq_column, queues)


@functools.lru_cache(maxsize=1)
def dispatch_properties(data: bytes) -> tuple[int, str, str]:
    """(tagsCode, KEYS, UNIQ_KEY) of a record's properties field. The last field read is
    remembered: a producer sending only tags sends the same field in batch after batch."""
    properties = mf.decode_properties(data.decode()) if data else {}
    tags = properties.get(mf.PROPERTY_TAGS)
    return (tags_code(tags) if tags else 0, properties.get(mf.PROPERTY_KEYS, ""),
            properties.get(mf.PROPERTY_UNIQ_KEY, ""))


_TAGS_CODES: dict[str, int] = {}


def tags_code(tags: str) -> int:
    """Cached tags hash code: a store sees few distinct tags."""
    code = _TAGS_CODES.get(tags)
    if code is None:
        code = mf.tags_hash_code(tags)
        if len(_TAGS_CODES) < 65536:
            _TAGS_CODES[tags] = code
    return code


def _ints(values: list[int]) -> np.ndarray:
    return np.array(values, dtype=np.int64)
