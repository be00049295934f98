"""CommitLog: every message of every topic, appended to one MappedFileQueue (spec store §2, §3, §9).

Records use the layout of `rmq.message_format` (spec store §3, TV2). A batch is encoded and
planned in full (queue offsets, physical offsets, end-of-file blank records, new files)
before a byte is written, so a batch is stored completely or not at all.
"""

from __future__ import annotations

import logging
import mmap
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

import numpy as np
from zlib_ng.zlib_ng import crc32

from rmq import message_format as mf
from rmq.record_columns import RecordColumns, RecordParts, concatenate
from rmq.statuses import PutMessageStatus
from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.config import BrokerRole, FlushDiskType, MessageStoreConfig
from rmq.store.dispatch_batch import DispatchBatch, dispatch_properties, tags_code
from rmq.store.errors import StoreError
from rmq.store.mapped_file import MappedFile, now_ms
from rmq.store.mapped_file_queue import MappedFileQueue
from rmq.store.message_batch import MessageBatch, QueueGroups, distinct
from rmq.store.results import EMPTY_HOST, DispatchRequest, MessageToStore

log = logging.getLogger(__name__)

HEADER, BLANK = mf.HEADER, mf.BLANK   # spec store-commitlog-consumequeue §3

T = TypeVar("T")

# MessageSysFlag transaction types (spec store §2).
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_TYPE_MASK


def body_crc(body: bytes) -> int:
    """BODYCRC: the body's CRC-32 (zlib's), masked to 31 bits. zlib-ng's crc32 gives zlib's value
    in 58 ns for 100 B and 95 ns for 1 KiB where the system zlib 1.2.13 took 200 and 614 ns: a
    fifth to a half of a batch put's CPU (bench/NOTES.md, issue 29 item 3)."""
    return crc32(body) & 0x7FFFFFFF


@dataclass(slots=True)
class EncodedBatch:
    """A validated MessageBatch with everything that does not depend on its position."""

    batch: MessageBatch
    lengths: np.ndarray           # int64, the whole record
    body_lengths: np.ndarray      # int64
    crcs: np.ndarray              # int64
    topic_prefixes: list[bytes]   # topic length byte + topic
    properties_length_fields: list[bytes]   # 2 bytes each, big-endian
    queues: QueueGroups


@dataclass(slots=True)
class AppendedBatch:
    start_offset: int    # where this append began writing (an end-of-file blank record or the first record)
    end_offset: int      # just after the last record
    physical_offsets: np.ndarray   # int64, one per message
    queue_offsets: np.ndarray      # int64, one per message
    store_timestamp: int           # taken under the put lock: it grows with the physical offset


_TOPIC_PREFIXES: dict[str, bytes] = {}


def topic_prefix(topic: str) -> bytes | None:
    """Topic length byte + UTF-8 topic, None when the topic is empty or longer than 127 bytes."""
    prefix = _TOPIC_PREFIXES.get(topic)
    if prefix is None:
        data = topic.encode()
        if not data or len(data) > mf.MAX_TOPIC_LENGTH:
            return None
        prefix = bytes((len(data),)) + data
        if len(_TOPIC_PREFIXES) < 65536:
            _TOPIC_PREFIXES[topic] = prefix
    return prefix


def well_formed_properties(data: bytes) -> bool:
    """UTF-8 "name\x01value\x02" items: every item ends with \x02 and holds one \x01."""
    try:
        items = data.decode().split(mf.PROPERTY_SEPARATOR)
    except UnicodeDecodeError:
        return False
    if items[-1] != "":
        return False
    for item in items[:-1]:   # a loop, not a generator: one frame per put, not one per property
        if item.count(mf.NAME_VALUE_SEPARATOR) != 1:
            return False
    return True


_INT32_MAX = 2**31


def encode_batch(batch: MessageBatch, max_message_size: int, max_record_in_file: int
                 ) -> EncodedBatch | PutMessageStatus:
    """Validate a whole batch (spec store §2 checks 3-4, doAppend steps 4-6; TV3) column-wise.
    A refused batch reports the status the first failing message would get from the checks
    in their spec order: topic, properties, host and queue id, size."""
    count = len(batch)
    prefix_of = {topic: topic_prefix(topic) for topic in distinct(batch.topics)}
    well_formed = {data: well_formed_properties(data) for data in distinct(batch.properties)}
    body_lengths = np.fromiter(map(len, batch.bodies), np.int64, count)
    topic_lengths: int | np.ndarray
    properties_lengths: int | np.ndarray
    if len(prefix_of) == 1:     # one value for every message: the lengths are scalars
        prefix = next(iter(prefix_of.values()))
        topic_prefixes = [prefix] * count
        topic_lengths = len(prefix) if prefix else 0
    else:
        topic_prefixes = [prefix_of[topic] for topic in batch.topics]
        topic_lengths = np.fromiter((len(p) if p else 0 for p in topic_prefixes), np.int64, count)
    if len(well_formed) == 1:
        properties_lengths = len(batch.properties[0])
        length_fields = [properties_lengths.to_bytes(2, "big")
                         if properties_lengths <= mf.MAX_PROPERTIES_LENGTH else b""] * count
    else:
        properties_lengths = np.fromiter(map(len, batch.properties), np.int64, count)
        length_fields = properties_lengths.clip(0, mf.MAX_PROPERTIES_LENGTH).astype(">u2").view("V2").tolist()
    lengths = body_lengths + (mf.FIXED_OVERHEAD - 1 + topic_lengths + properties_lengths)
    if not _valid(batch, lengths, min(max_message_size, max_record_in_file), prefix_of, well_formed):
        return _refusal(batch, lengths, max_message_size, max_record_in_file, topic_prefixes, well_formed)
    crcs = np.fromiter(map(crc32, batch.bodies), np.int64, count) & 0x7FFFFFFF
    # no prefix is None here: a bad topic refused the batch above
    return EncodedBatch(batch, lengths, body_lengths, crcs, cast(list[bytes], topic_prefixes), length_fields,
                        QueueGroups.of(batch.topics, batch.queue_ids))


def _valid(batch: MessageBatch, lengths: np.ndarray, max_length: int, prefix_of: dict[str, bytes | None],
           well_formed: dict[bytes, bool]) -> bool:
    """Whether every message passes every check, by a few whole-column reductions."""
    if not len(batch):
        return True
    return (None not in prefix_of.values() and all(well_formed.values())
            and max(map(len, well_formed)) <= mf.MAX_PROPERTIES_LENGTH
            and all(len(host) == mf.HOST_SIZE for host in distinct(batch.born_hosts))
            and _numbers_valid(batch, lengths, max_length))


def _numbers_valid(batch: MessageBatch, lengths: np.ndarray, max_length: int) -> bool:
    """Record lengths within `max_length`, queue ids and the int32 fields within their range."""
    if len(batch) == 1:   # the latency path: Python compares one value faster than numpy reduces it
        values = (int(batch.flags[0]), int(batch.sys_flags[0]), int(batch.reconsume_times[0]))
        return (int(lengths[0]) <= max_length and 0 <= int(batch.queue_ids[0]) < _INT32_MAX
                and all(-_INT32_MAX <= value < _INT32_MAX for value in values))
    ints = np.concatenate((batch.flags, batch.sys_flags, batch.reconsume_times))
    return (int(lengths.max()) <= max_length
            and int(batch.queue_ids.min()) >= 0 and int(batch.queue_ids.max()) < _INT32_MAX
            and int(ints.min()) >= -_INT32_MAX and int(ints.max()) < _INT32_MAX)


def _refusal(batch: MessageBatch, lengths: np.ndarray, max_message_size: int, max_record_in_file: int,
             topic_prefixes: list[bytes | None], well_formed: dict[bytes, bool]) -> PutMessageStatus:
    """The status of the first failing message of a batch that fails a check."""
    count = len(batch)
    status = np.zeros(count, dtype=np.int8)    # 0: fine; assigned from the last check to the first
    status[(lengths > max_message_size) | (lengths > max_record_in_file)] = 1
    status[(batch.queue_ids < 0) | (batch.queue_ids >= _INT32_MAX) | _outside_int32(batch.flags)
           | _outside_int32(batch.sys_flags) | _outside_int32(batch.reconsume_times)] = 2
    if any(len(host) != mf.HOST_SIZE for host in distinct(batch.born_hosts)):
        status[np.fromiter((len(h) != mf.HOST_SIZE for h in batch.born_hosts), bool, count)] = 2
    status[np.fromiter(map(len, batch.properties), np.int64, count) > mf.MAX_PROPERTIES_LENGTH] = 3
    if not all(well_formed.values()):
        status[np.fromiter(map(well_formed.__getitem__, batch.properties), bool, count) == 0] = 2
    status[np.fromiter((p is None for p in topic_prefixes), bool, count)] = 2
    return _REFUSALS[status[np.argmax(status != 0)]]


_REFUSALS = {1: PutMessageStatus.MESSAGE_SIZE_EXCEEDED, 2: PutMessageStatus.MESSAGE_ILLEGAL,
             3: PutMessageStatus.PROPERTIES_SIZE_EXCEEDED}


def _outside_int32(column: np.ndarray) -> np.ndarray:
    return (column < -_INT32_MAX) | (column >= _INT32_MAX)


@dataclass(slots=True)
class OneRecord:
    """One message to append on the single-message path (RocketMQ MessageExtBrokerInner): the
    columns of a MessageBatch of one, as plain values (no numpy array is built for it)."""

    topic: str
    queue_id: int
    body: bytes
    properties: bytes = b""        # the record's properties field (UTF-8 "name\x01value\x02...")
    flag: int = 0
    born_timestamp: int = 0
    born_host: bytes = EMPTY_HOST
    sys_flag: int = 0
    reconsume_times: int = 0

    def to_store(self) -> MessageToStore:
        """The same message for the batch path (its properties field decoded)."""
        properties = mf.decode_properties(self.properties.decode()) if self.properties else {}
        return MessageToStore(self.topic, self.queue_id, self.body, properties, self.flag,
                              self.born_timestamp, self.born_host, self.sys_flag, self.reconsume_times)


@dataclass(slots=True)
class EncodedRecord:
    """A validated OneRecord with what does not depend on its position."""

    record: OneRecord
    length: int
    crc: int
    topic_prefix: bytes
    properties_length_field: bytes


@dataclass(slots=True)
class AppendedRecord:
    physical_offset: int
    queue_offset: int      # the next one of its queue for a PREPARED record (it takes none)
    store_timestamp: int


_WELL_FORMED: dict[bytes, bool] = {}


def _well_formed(data: bytes) -> bool:
    """well_formed_properties, remembered for short fields seen before (a producer repeats its tags)."""
    known = _WELL_FORMED.get(data)
    if known is None:
        known = well_formed_properties(data)
        if len(_WELL_FORMED) < 4096 and len(data) <= 256:
            _WELL_FORMED[data] = known
    return known


def encode_record(record: OneRecord, max_message_size: int, max_record_in_file: int
                  ) -> EncodedRecord | PutMessageStatus:
    """encode_batch for one message: the same checks in the same order (topic, properties,
    host and queue id, size), answered with the same status."""
    prefix = _TOPIC_PREFIXES.get(record.topic) or topic_prefix(record.topic)   # no call once seen
    properties = record.properties
    if prefix is None or not (_WELL_FORMED.get(properties) or _well_formed(properties)):
        return PutMessageStatus.MESSAGE_ILLEGAL
    if len(properties) > mf.MAX_PROPERTIES_LENGTH:
        return PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    if (len(record.born_host) != mf.HOST_SIZE or not 0 <= record.queue_id < _INT32_MAX
            or not -_INT32_MAX <= record.flag < _INT32_MAX or not -_INT32_MAX <= record.sys_flag < _INT32_MAX
            or not -_INT32_MAX <= record.reconsume_times < _INT32_MAX):
        return PutMessageStatus.MESSAGE_ILLEGAL
    length = len(record.body) + mf.FIXED_OVERHEAD - 1 + len(prefix) + len(properties)
    if length > max_message_size or length > max_record_in_file:
        return PutMessageStatus.MESSAGE_SIZE_EXCEEDED
    return EncodedRecord(record, length, crc32(record.body) & 0x7FFFFFFF, prefix,
                         len(properties).to_bytes(2, "big"))


# The fixed 88 bytes before the body as one numpy record: mf.HEADER_FIELDS, big-endian.
_NUMPY_CODES = {"i": ">i4", "q": ">i8", f"{mf.HOST_SIZE}s": f"S{mf.HOST_SIZE}"}
HEADER_DTYPE = np.dtype([(name, _NUMPY_CODES[code]) for name, code in mf.HEADER_FIELDS])
assert HEADER_DTYPE.itemsize == HEADER.size
_PARTS = 5   # header, body, topic prefix, properties length, properties


@dataclass(slots=True)
class _Segment:
    """The records [first, end) of a batch that go to one file, at `position`; `blank` is the
    END_OF_FILE record that closes the file after them (b"" for the batch's last file)."""

    file_offset: int
    position: int
    first: int
    end: int
    size: int     # bytes of the records
    blank: bytes


def _record_parts(encoded: EncodedBatch, physical_offsets: np.ndarray, queue_offsets: np.ndarray,
                  store_timestamp: int, store_host: bytes) -> list[bytes]:
    """The records as _PARTS pieces per message, for b"".join: the headers are built as one
    structured array, the rest are the batch's own bytes objects."""
    batch = encoded.batch
    count = len(batch)
    if count == 1:   # the latency path: struct packs one header faster than numpy fills one row
        header = _header(encoded, int(physical_offsets[0]), int(queue_offsets[0]), store_timestamp,
                         store_host)
        return [header, batch.bodies[0], encoded.topic_prefixes[0], encoded.properties_length_fields[0],
                batch.properties[0]]
    headers = np.zeros(count, dtype=HEADER_DTYPE)
    headers["total_size"] = encoded.lengths
    headers["magic_code"] = mf.MESSAGE_MAGIC_CODE
    headers["body_crc"] = encoded.crcs
    headers["queue_id"] = batch.queue_ids
    headers["flag"] = batch.flags
    headers["queue_offset"] = queue_offsets
    headers["physical_offset"] = physical_offsets
    headers["sys_flag"] = batch.sys_flags
    headers["born_timestamp"] = batch.born_timestamps
    hosts = distinct(batch.born_hosts)
    headers["born_host"] = hosts[0] if len(hosts) == 1 else batch.born_hosts
    headers["store_timestamp"] = store_timestamp
    headers["store_host"] = store_host
    headers["reconsume_times"] = batch.reconsume_times
    headers["body_length"] = encoded.body_lengths
    parts: list[bytes] = [b""] * (count * _PARTS)
    parts[0::_PARTS] = headers.view("V88").tolist()
    parts[1::_PARTS] = batch.bodies
    parts[2::_PARTS] = encoded.topic_prefixes
    parts[3::_PARTS] = encoded.properties_length_fields
    parts[4::_PARTS] = batch.properties
    return parts


def _header(encoded: EncodedBatch, physical_offset: int, queue_offset: int, store_timestamp: int,
            store_host: bytes) -> bytes:
    """The fixed 88 bytes of the batch's first record, as _record_parts' headers row 0."""
    batch = encoded.batch
    return HEADER.pack(int(encoded.lengths[0]), mf.MESSAGE_MAGIC_CODE, int(encoded.crcs[0]),
                       int(batch.queue_ids[0]), int(batch.flags[0]), queue_offset, physical_offset,
                       int(batch.sys_flags[0]), int(batch.born_timestamps[0]), batch.born_hosts[0],
                       store_timestamp, store_host, int(batch.reconsume_times[0]), 0,
                       int(encoded.body_lengths[0]))


class CommitLog:
    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        self.store_host = config.store_host_bytes()
        self.mapped_file_queue = MappedFileQueue(
            Path(config.store_dir) / "commitlog", config.mapped_file_size_commit_log, preallocate=True)
        self._topic_queue_table: dict[str, int] = {}   # "topic-queueId" -> next queue offset
        self._put_lock = threading.Lock()   # one appender at a time: offsets, table, files
        self.max_record_in_file = config.mapped_file_size_commit_log - mf.END_FILE_MIN_BLANK_LENGTH
        # _write(mapped, position, data), chosen once (no call per append to choose it): under
        # ASYNC flush through the file (pwrite: no page fault zero-filling each new page of the
        # map first); under SYNC flush through the map, where a put waits for the disk anyway: on
        # a filesystem whose writes queue behind a running fsync (FUSE, the slow-disk test) a
        # pwrite would wait the fsync out instead of answering at the flush timeout.
        self._write: Callable[[MappedFile, int, bytes], None] = (
            MappedFile.write_through_file if config.flush_disk_type is FlushDiskType.ASYNC
            else MappedFile.write)

    def load(self) -> None:
        self.mapped_file_queue.load()

    def encode(self, batch: MessageBatch) -> EncodedBatch | PutMessageStatus:
        return encode_batch(batch, self.config.max_message_size, self.max_record_in_file)

    # -- append --------------------------------------------------------------------------------

    def append(self, encoded: EncodedBatch, store_timestamp: int | None = None) -> AppendedBatch:
        """Append a validated batch under the put lock, stamped with `store_timestamp` or else
        the time the lock was taken. Raises OSError (nothing written) when a needed file
        cannot be created."""
        with self._put_lock:
            return self._append(encoded, now_ms() if store_timestamp is None else store_timestamp)

    def try_append(self, encoded: EncodedBatch) -> AppendedBatch | None:
        """append for a caller that must not wait: None, nothing written, when another putter
        holds the put lock or the batch does not fit in the last file (creating and
        preallocating the next one takes long)."""
        if not self._put_lock.acquire(blocking=False):
            return None
        try:
            last = self.mapped_file_queue.last_file()
            room = 0 if last is None or last.is_full() else last.file_size - last.wrote_position
            if int(encoded.lengths.sum()) + mf.END_FILE_MIN_BLANK_LENGTH > room:
                return None
            return self._append(encoded, now_ms())
        finally:
            self._put_lock.release()

    def append_record(self, encoded: EncodedRecord, wait: bool) -> AppendedRecord | None:
        """Append one record where the last file has room for it, under the put lock (not
        waiting for it unless `wait`): None, nothing written, when the lock is taken and `wait`
        is False, or when the record needs a new file (the batch path rolls files)."""
        if not self._put_lock.acquire(blocking=wait):
            return None
        try:
            files = self.mapped_file_queue.files
            if not files:
                return None
            last = files[-1]
            position = last.wrote_position   # a full file has no room left: the check below says so
            if position + encoded.length + mf.END_FILE_MIN_BLANK_LENGTH > last.file_size:
                return None
            record = encoded.record
            physical_offset = last.file_from_offset + position
            key = f"{record.topic}-{record.queue_id}"
            table = self._topic_queue_table
            queue_offset = table.get(key, 0)
            store_timestamp = time.time_ns() // 1_000_000   # now_ms(), without the call
            header = HEADER.pack(encoded.length, mf.MESSAGE_MAGIC_CODE, encoded.crc, record.queue_id,
                                 record.flag, queue_offset, physical_offset, record.sys_flag,
                                 record.born_timestamp, record.born_host, store_timestamp, self.store_host,
                                 record.reconsume_times, 0, len(record.body))
            self._write(last, position, b"".join((header, record.body, encoded.topic_prefix,
                                                  encoded.properties_length_field, record.properties)))
            last.wrote_position = position + encoded.length
            last.store_timestamp = store_timestamp
            if not record.sys_flag & TRANSACTION_PREPARED_TYPE:   # only NOT / COMMIT take a queue offset
                table[key] = queue_offset + 1
            return AppendedRecord(physical_offset, queue_offset, store_timestamp)
        finally:
            self._put_lock.release()

    def _append(self, encoded: EncodedBatch, store_timestamp: int) -> AppendedBatch:
        queue = self.mapped_file_queue
        last = queue.last_file()
        if last is None or last.is_full():
            start_offset = 0 if last is None else last.file_from_offset + queue.mapped_file_size
            new_files = [start_offset]
        else:
            start_offset, new_files = last.file_from_offset + last.wrote_position, []
        segments, physical_offsets = self._place(encoded.lengths, start_offset)
        new_files += [segment.file_offset for segment in segments[1:]]
        queue_offsets, next_offsets = self._queue_offsets(encoded)
        records = _record_parts(encoded, physical_offsets, queue_offsets, store_timestamp, self.store_host)
        for offset in new_files:   # may raise OSError: nothing has been written yet
            queue.create_file(offset)
        for segment in segments:
            mapped = queue.find_mapped_file_by_offset(segment.file_offset)
            assert mapped is not None, "the file was found or created above"
            parts = records[segment.first * _PARTS:segment.end * _PARTS]
            parts.append(segment.blank)
            self._write(mapped, segment.position, b"".join(parts))
            # a file closed by the blank record is full; its 8 bytes stand for the rest
            mapped.wrote_position = segment.position + segment.size if not segment.blank else mapped.file_size
            mapped.store_timestamp = store_timestamp
        self._topic_queue_table.update(next_offsets)
        end = segments[-1]
        return AppendedBatch(start_offset, end.file_offset + end.position + end.size, physical_offsets,
                             queue_offsets, store_timestamp)

    @property
    def topic_queue_table(self) -> dict[str, int]:
        """A copy of "topic-queueId" -> the queue offset the next message gets."""
        with self._put_lock:
            return dict(self._topic_queue_table)

    def reset_topic_queue_table(self, table: dict[str, int]) -> None:
        """Recovery: each queue's next queue offset, as the ConsumeQueues say."""
        with self._put_lock:
            self._topic_queue_table = dict(table)

    def forget_queues(self, topic: str, queue_ids: Iterable[int]) -> None:
        """A deleted topic's queues start again at queue offset 0 if it is created again."""
        with self._put_lock:
            for queue_id in queue_ids:
                self._topic_queue_table.pop(f"{topic}-{queue_id}", None)

    def append_replicated(self, offset: int, data: bytes) -> None:
        """A slave appends the master's CommitLog bytes at the same physical offset (RocketMQ
        HAClient -> appendToCommitLog); `data` lies within one file. Raises StoreError when
        `offset` is not where this CommitLog ends or `data` would cross a file end."""
        queue = self.mapped_file_queue
        with self._put_lock:
            last = queue.last_file()
            if last is None:
                if offset % queue.mapped_file_size:
                    raise StoreError(f"replicated bytes start at offset {offset}, "
                                     "not at a CommitLog file start")
                last = queue.create_file(offset)
            elif offset != self.get_max_offset():
                raise StoreError(f"replicated bytes start at offset {offset} but this CommitLog ends at "
                                 f"{self.get_max_offset()}")
            elif last.is_full():
                last = queue.create_file(offset)
            position = offset - last.file_from_offset
            if position + len(data) > last.file_size:
                raise StoreError(f"replicated bytes [{offset}, {offset + len(data)}) cross the end of "
                                 f"CommitLog file {last.path.name}")
            last.write(position, data)
            last.wrote_position = position + len(data)

    def _place(self, lengths: np.ndarray, offset: int) -> tuple[list[_Segment], np.ndarray]:
        """Split the batch at file ends (END_OF_FILE, spec store §2 doAppend step 7, TV4: a
        blank record fills the rest of the file, the record starts the next one) and give each
        record its physical offset."""
        file_size = self.mapped_file_queue.mapped_file_size
        position = offset % file_size
        single = len(lengths) == 1   # the latency path: one record needs no cumulative sums
        ends = lengths if single else np.cumsum(lengths)
        size = int(ends[-1])
        if position + size + mf.END_FILE_MIN_BLANK_LENGTH <= file_size:   # all in this file
            segment = _Segment(offset - position, position, 0, len(lengths), size, b"")
            return [segment], np.array([offset], dtype=np.int64) if single else offset + ends - lengths
        physical_offsets = np.empty(len(lengths), dtype=np.int64)
        segments = []
        first = 0
        while True:
            position = offset % file_size
            file_offset = offset - position
            ends = position + np.cumsum(lengths[first:])
            fitting = int(np.searchsorted(ends, file_size - mf.END_FILE_MIN_BLANK_LENGTH, side="right"))
            end = first + fitting
            physical_offsets[first:end] = file_offset + ends[:fitting] - lengths[first:end]
            size = int(ends[fitting - 1]) - position if fitting else 0
            if end == len(lengths):
                segments.append(_Segment(file_offset, position, first, end, size, b""))
                return segments, physical_offsets
            blank = BLANK.pack(file_size - position - size, mf.BLANK_MAGIC_CODE)
            segments.append(_Segment(file_offset, position, first, end, size, blank))
            first, offset = end, file_offset + file_size

    def _queue_offsets(self, encoded: EncodedBatch) -> tuple[np.ndarray, dict[str, int]]:
        """Each message's queue offset, and each queue's next one. Only NOT / COMMIT messages
        take a queue offset (spec store §2 step 9); a PREPARED one reports the next."""
        queues = encoded.queues
        keys = [f"{topic}-{queue_id}" for topic, queue_id in queues.queues]
        table = self._topic_queue_table
        if len(encoded.batch) == 1:   # the latency path: no numpy for one message
            start = table.get(keys[0], 0)
            taken = int(encoded.batch.sys_flags[0]) & TRANSACTION_PREPARED_TYPE == 0
            return np.array([start], dtype=np.int64), {keys[0]: start + 1} if taken else {}
        counted = (encoded.batch.sys_flags & TRANSACTION_PREPARED_TYPE) == 0
        if len(keys) == 1 and counted.all():    # one queue, no PREPARED message: the common case
            start, count = table.get(keys[0], 0), len(counted)
            return np.arange(start, start + count, dtype=np.int64), {keys[0]: start + count}
        base = np.array([table.get(key, 0) for key in keys], dtype=np.int64)
        queue_offsets = base[queues.index] + queues.positions_in_queue(counted)
        counts = queues.counts(counted).tolist()
        return queue_offsets, {key: offset + count for key, offset, count in zip(keys, base.tolist(), counts,
                                                                                 strict=True) if count}

    # -- read ------------------------------------------------------------------------------------

    def get_min_offset(self) -> int:
        """First readable physical offset (-1 when empty)."""
        return self.mapped_file_queue.get_min_offset()

    def get_max_offset(self) -> int:
        return self.mapped_file_queue.get_max_offset()

    def roll_next_file(self, offset: int) -> int:
        return self.mapped_file_queue.roll_next_file(offset)

    def get_message(self, offset: int, size: int, through_file: bool = False) -> bytes | None:
        """The `size` bytes at `offset`, None when they are not (or no longer) readable;
        `through_file`: read by pread, as `gather`."""
        if through_file:
            read = self.gather(np.array([offset], np.int64), np.array([size], np.int64), through_file)
            return None if read is None else bytes(read)
        mapped = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        selected = mapped.select_mapped_buffer(offset - mapped.file_from_offset, size) if mapped else None
        return selected[1] if selected is not None and len(selected[1]) == size else None

    def read_bytes(self, offset: int, max_bytes: int) -> bytes:
        """The CommitLog bytes from `offset` up to the end of its file's written part, at most
        `max_bytes` (b"" when nothing is readable there): what a master sends its slaves."""
        mapped = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        if mapped is None:
            return b""
        selected = mapped.select_mapped_buffer(offset - mapped.file_from_offset, max_bytes)
        return selected[1] if selected is not None else b""

    def read_store_timestamp(self, offset: int) -> int | None:
        data = self.get_message(offset + mf.STORE_TIMESTAMP_POS, 8)
        return int.from_bytes(data, "big", signed=True) if data is not None else None

    def gather(self, offsets: np.ndarray, sizes: np.ndarray, through_file: bool = False
               ) -> bytes | memoryview | None:
        """The records at `offsets` back to back: one slice per run of adjacent records
        (records never span files), so contiguous batches cost one copy; None when one is not
        (or no longer) readable. The records of each file are read from its mapping held once
        (a pull's usual case is one file: its queue's records interleaved with other queues'); a
        memoryview when MappedFile.read_records answers one. `through_file`: read by pread
        (MappedFile.read_through_file), so the pages never enter this process's resident memory:
        for a reader that reads each record once and keeps none (the timer enqueue task)."""
        if len(offsets) == 0:
            return b""
        read: Callable[[MappedFile, np.ndarray, np.ndarray], bytes | memoryview] = (
            MappedFile.read_through_file if through_file else MappedFile.read_records)
        parts = self._per_file(offsets, sizes, read)
        if parts is None:
            return None
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def gather_columns(self, offsets: np.ndarray, sizes: np.ndarray, parts: RecordParts
                       ) -> RecordColumns | None:
        """The `parts` of the records at `offsets` of `sizes` (int64), gathered column-wise in each
        file (rmq.record_columns); None when one is not (or no longer) readable."""
        per_file = self._per_file(
            offsets, sizes, lambda mapped, starts, ends: mapped.read_columns(starts, ends - starts, parts))
        return None if per_file is None else concatenate(per_file)

    def _per_file(self, offsets: np.ndarray, sizes: np.ndarray,
                  read: Callable[[MappedFile, np.ndarray, np.ndarray], T]) -> list[T] | None:
        """`read(file, starts, ends)` of the records at `offsets` of `sizes` in each file they lie
        in (positions in it), in order; None when one is not (or no longer) readable. At least
        one record."""
        file_size = self.mapped_file_queue.mapped_file_size
        ends = offsets + sizes
        first = int(offsets.min())
        base = first - first % file_size
        if int(ends.max()) <= base + file_size:
            part = self._read_in_file(base, offsets - base, ends - base, read)
            return None if part is None else [part]
        bases = offsets - offsets % file_size
        file_breaks = (np.flatnonzero(bases[1:] != bases[:-1]) + 1).tolist()
        parts = []
        for start, stop in zip([0, *file_breaks], [*file_breaks, len(offsets)], strict=True):
            base = int(bases[start])
            part = self._read_in_file(base, offsets[start:stop] - base, ends[start:stop] - base, read)
            if part is None:
                return None
            parts.append(part)
        return parts

    def _read_in_file(self, base: int, starts: np.ndarray, ends: np.ndarray,
                      read: Callable[[MappedFile, np.ndarray, np.ndarray], T]) -> T | None:
        """`read` of records that all lie in the file starting at `base` (positions in it), the
        file held meanwhile."""
        mapped = self.mapped_file_queue.find_mapped_file_by_offset(base)
        if mapped is None or not mapped.hold():
            return None
        try:
            if int(ends.max()) > mapped.read_position():
                return None
            return read(mapped, starts, ends)
        except ValueError:
            return None
        finally:
            mapped.release()

    # -- parse -----------------------------------------------------------------------------------

    def check_message(self, mapped: MappedFile, position: int, check_crc: bool
                      ) -> tuple[int, DispatchRequest | None]:
        """checkMessageAndReturnSize: (size, request) for a record, (0, None) for the blank
        end-of-file record, (-1, None) for anything invalid (spec store §8)."""
        return parse_record(mapped.mm, position, mapped.file_size, mapped.file_from_offset, check_crc)

    # -- recovery (spec store §9.3 / §9.4) --------------------------------------------------------

    def recover(self, normal: bool, checkpoint: StoreCheckpoint) -> tuple[int, int]:
        """Find the end of the valid records and truncate everything after it. Returns
        (that end offset, the offset the scan started from)."""
        queue = self.mapped_file_queue
        files = queue.files
        if not files:
            queue.set_flushed_where(0)
            return 0, 0
        index = max(len(files) - 3, 0) if normal else self._abnormal_start_index(files, checkpoint)
        scan_start = files[index].file_from_offset
        position = 0
        while True:
            mapped = files[index]
            size, _ = self.check_message(mapped, position, self.config.check_crc_on_recover)
            if size > 0:
                position += size
            elif size == 0 and index + 1 < len(files):
                index += 1
                position = 0
            else:
                break
        if self.config.broker_role is BrokerRole.SLAVE:
            self._warn_if_valid_records_follow(files, index, position)
        else:
            self._refuse_if_valid_records_follow(files, index, position)
        process_offset = files[index].file_from_offset + position
        self.truncate(process_offset)
        last = queue.last_file()
        if last is not None:
            last.store_timestamp = checkpoint.physic_msg_timestamp
        return process_offset, scan_start

    def truncate(self, offset: int) -> None:
        """Drop every byte from `offset` on (recovery, before any append): the flush from
        there writes the zeroed pages back."""
        queue = self.mapped_file_queue
        queue.set_flushed_where(offset)
        queue.truncate_dirty_files(offset)

    def _abnormal_start_index(self, files: list[MappedFile], checkpoint: StoreCheckpoint) -> int:
        """Walk back to the first file whose first record is older than the checkpoint
        (isMappedFileMatchedRecover); everything after it is re-dispatched."""
        min_timestamp = checkpoint.min_timestamp()
        for index in range(len(files) - 1, -1, -1):
            magic, = struct.unpack_from(">i", files[index].mm, mf.MAGIC_CODE_POS)
            store_ts, = struct.unpack_from(">q", files[index].mm, mf.STORE_TIMESTAMP_POS)
            if magic == mf.MESSAGE_MAGIC_CODE and store_ts != 0 and store_ts <= min_timestamp:
                return index
        return 0

    def _refuse_if_valid_records_follow(self, files: list[MappedFile], index: int, position: int) -> None:
        """A torn tail is followed by garbage. A complete record (magic, size, physical offset
        and CRC all right) after the invalid one means the damage is in the middle: truncating
        would drop acknowledged messages, so the store is refused."""
        later = _valid_record_after(files, index, position)
        if later is not None:
            raise StoreError(f"{_torn_at(files[index], position, later)}: the CommitLog is corrupt beyond a "
                             "torn tail; refusing to truncate it")

    def _warn_if_valid_records_follow(self, files: list[MappedFile], index: int, position: int) -> None:
        """A slave's CommitLog is a copy of its master's: it is truncated at the first invalid
        record whatever follows, and replication fetches the rest again (the master checks the
        slave's prefix by CRC). A kill -9 in the middle of copying a replicated chunk can leave
        complete records after an unwritten one (memcpy need not write in order)."""
        later = _valid_record_after(files, index, position)
        if later is not None:
            log.warning("%s: truncated there on this slave; replication copies the rest from the "
                        "master again", _torn_at(files[index], position, later))

    def close(self) -> None:
        self.mapped_file_queue.close()


_MIN_RECORD = mf.FIXED_OVERHEAD + 1


def _valid_record_after(files: list[MappedFile], index: int, position: int) -> int | None:
    """The offset of a complete record after the invalid one at `position` of files[index]
    (in that file or at the start of the next), if any."""
    mapped = files[index]
    later = _find_valid_record(mapped, position + 1)
    if later is None and index + 1 < len(files):
        following = files[index + 1]
        if parse_record(following.mm, 0, following.file_size, following.file_from_offset, True)[0] > 0:
            later = following.file_from_offset
    return later


def _torn_at(mapped: MappedFile, position: int, later: int) -> str:
    return (f"{mapped.path}: invalid record at position {position} (offset "
            f"{mapped.file_from_offset + position}) but a complete record follows at offset {later}")


def parse_record(buffer: bytes | mmap.mmap, position: int, file_size: int, file_from_offset: int,
                 check_crc: bool) -> tuple[int, DispatchRequest | None]:
    """checkMessageAndReturnSize on `buffer` (a file's mmap) at `position`."""
    if position + HEADER.size > file_size:
        if position + mf.END_FILE_MIN_BLANK_LENGTH > file_size:
            return -1, None
        total_size, magic = BLANK.unpack_from(buffer, position)
        is_blank = magic == mf.BLANK_MAGIC_CODE and total_size == file_size - position
        return (0, None) if is_blank else (-1, None)
    (total_size, magic, crc, queue_id, _flag, queue_offset, physical_offset, sys_flag, _born_ts, _born_host,
     store_timestamp, _store_host, _reconsume, _pto, body_length) = HEADER.unpack_from(buffer, position)
    if magic != mf.MESSAGE_MAGIC_CODE:
        if magic == mf.BLANK_MAGIC_CODE and total_size == file_size - position:
            return 0, None
        return -1, None
    end = position + total_size
    if (not _MIN_RECORD <= total_size <= file_size - position or body_length < 0
            or physical_offset != file_from_offset + position):
        return -1, None
    body_end = position + mf.BODY_POS + body_length
    if body_end + 3 > end:
        return -1, None
    topic_end = body_end + 1 + buffer[body_end]
    properties_end = topic_end + 2 + int.from_bytes(buffer[topic_end:topic_end + 2], "big")
    if properties_end != end:     # calMsgLength(body, topic, properties) != TOTALSIZE
        return -1, None
    if check_crc and body_crc(buffer[position + mf.BODY_POS:body_end]) != crc:
        return -1, None
    try:
        topic = _topic_name(buffer[body_end + 1:topic_end])
        properties = mf.decode_properties(buffer[topic_end + 2:end].decode())
    except UnicodeDecodeError:
        return -1, None
    tags = properties.get(mf.PROPERTY_TAGS)
    request = DispatchRequest(topic, queue_id, physical_offset, total_size, tags_code(tags) if tags else 0,
                              store_timestamp, queue_offset, properties.get(mf.PROPERTY_KEYS, ""),
                              properties.get(mf.PROPERTY_UNIQ_KEY, ""), sys_flag)
    return total_size, request


def appended_dispatch(encoded: EncodedBatch, appended: AppendedBatch, store_timestamp: int) -> DispatchBatch:
    """The DispatchBatch parse_record would read back from the records just appended."""
    batch = encoded.batch
    return DispatchBatch.of_properties(batch.topics, batch.queue_ids, appended.physical_offsets,
                                       encoded.lengths, store_timestamp, appended.queue_offsets,
                                       batch.sys_flags, batch.properties, encoded.queues)


def record_dispatch(encoded: EncodedRecord, appended: AppendedRecord) -> DispatchRequest:
    """The DispatchRequest parse_record would read back from the record just appended."""
    record = encoded.record
    tags, keys, uniq_key = dispatch_properties(record.properties)
    return DispatchRequest(record.topic, record.queue_id, appended.physical_offset, encoded.length, tags,
                           appended.store_timestamp, appended.queue_offset, keys, uniq_key, record.sys_flag)


_MAGIC_BYTES = struct.pack(">i", mf.MESSAGE_MAGIC_CODE)


def _find_valid_record(mapped: MappedFile, start: int) -> int | None:
    """Offset of the first complete, CRC-checked record beginning at or after `start`."""
    found = mapped.mm.find(_MAGIC_BYTES, start + mf.MAGIC_CODE_POS)
    while found != -1:
        position = found - mf.MAGIC_CODE_POS
        if parse_record(mapped.mm, position, mapped.file_size, mapped.file_from_offset, True)[0] > 0:
            return mapped.file_from_offset + position
        found = mapped.mm.find(_MAGIC_BYTES, found + 1)
    return None


_TOPIC_NAMES: dict[bytes, str] = {}


def _topic_name(data: bytes) -> str:
    name = _TOPIC_NAMES.get(data)
    if name is None:
        name = data.decode()
        if len(_TOPIC_NAMES) < 65536:
            _TOPIC_NAMES[data] = name
    return name
