"""CommitLog: every message of every topic, appended to one MappedFileQueue (spec store §2, §3, §9).

Records use the layout of `rmq.message_format` (spec store §3, TV2). A batch is encoded and
planned in full (queue offsets, physical offsets, end-of-file blank records, new files)
before a byte is written, so a batch is stored completely or not at all.
"""

from __future__ import annotations

import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
from rmq import message_format as mf

from store.checkpoint import StoreCheckpoint
from store.config import MessageStoreConfig
from store.errors import StoreError
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue
from store.results import DispatchRequest, MessageToStore, PutMessageStatus

# TOTALSIZE .. BODY length: the fixed 88 bytes before the body (spec store §3).
HEADER = struct.Struct(">iiiiiqqiq8sq8siqi")
BLANK = struct.Struct(">ii")
assert HEADER.size == mf.BODY_POS

# MessageSysFlag transaction types (spec store §2).
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x4
TRANSACTION_COMMIT_TYPE = 0x8
TRANSACTION_ROLLBACK_TYPE = 0xC


def transaction_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_TYPE_MASK


def body_crc(body: bytes) -> int:
    return zlib.crc32(body) & 0x7FFFFFFF


class EncodedMessage(NamedTuple):
    """A validated message with everything that does not depend on its position."""

    message: MessageToStore
    key: str            # "topic-queueId", the topicQueueTable key
    crc: int
    tail: bytes         # topic length + topic + properties length + properties
    length: int         # the whole record


@dataclass(slots=True)
class AppendedMessage:
    physical_offset: int
    queue_offset: int
    length: int


@dataclass(slots=True)
class AppendedBatch:
    start_offset: int    # where this append began writing (an end-of-file blank record or the first record)
    end_offset: int      # just after the last record
    messages: list[AppendedMessage]


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


def encode_message(message: MessageToStore, max_message_size: int, max_record_in_file: int
                   ) -> EncodedMessage | PutMessageStatus:
    """Validate (spec store §2 checks 3-4, doAppend steps 4-6; TV3) and pre-encode one message."""
    prefix = topic_prefix(message.topic)
    if prefix is None:
        return PutMessageStatus.MESSAGE_ILLEGAL
    properties = b""
    if message.properties:
        text = mf.encode_properties(message.properties)
        count = len(message.properties)
        if text.count(mf.NAME_VALUE_SEPARATOR) != count or text.count(mf.PROPERTY_SEPARATOR) != count:
            return PutMessageStatus.MESSAGE_ILLEGAL   # a name or value holds \x01 / \x02
        properties = text.encode()
        if len(properties) > mf.MAX_PROPERTIES_LENGTH:
            return PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
    if len(message.born_host) != mf.HOST_SIZE or not 0 <= message.queue_id < 2**31:
        return PutMessageStatus.MESSAGE_ILLEGAL
    body = message.body
    length = mf.FIXED_OVERHEAD - 1 + len(body) + len(prefix) + len(properties)
    if length > max_message_size or length > max_record_in_file:
        return PutMessageStatus.MESSAGE_SIZE_EXCEEDED
    tail = prefix + len(properties).to_bytes(2, "big") + properties
    return EncodedMessage(message, f"{message.topic}-{message.queue_id}", zlib.crc32(body) & 0x7FFFFFFF,
                          tail, length)


class CommitLog:
    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        self.store_host = config.store_host_bytes()
        self.mapped_file_queue = MappedFileQueue(
            Path(config.store_dir) / "commitlog", config.mapped_file_size_commit_log, preallocate=True)
        self.topic_queue_table: dict[str, int] = {}
        self.put_lock = threading.Lock()
        self.max_record_in_file = config.mapped_file_size_commit_log - mf.END_FILE_MIN_BLANK_LENGTH

    def load(self) -> None:
        self.mapped_file_queue.load()

    def encode(self, message: MessageToStore) -> EncodedMessage | PutMessageStatus:
        return encode_message(message, self.config.max_message_size, self.max_record_in_file)

    # -- append --------------------------------------------------------------------------------

    def append(self, batch: list[EncodedMessage], store_timestamp: int) -> AppendedBatch:
        """Append a validated batch; the caller holds put_lock. Raises OSError (nothing
        written) when a needed file cannot be created."""
        queue = self.mapped_file_queue
        file_size = queue.mapped_file_size
        last = queue.last_file()
        new_offsets: list[int] = []
        if last is None or last.is_full():
            file_offset = 0 if last is None else last.file_from_offset + file_size
            position = 0
            new_offsets.append(file_offset)
        else:
            file_offset, position = last.file_from_offset, last.wrote_position
        start_offset = file_offset + position
        segments: list[tuple[int, int, list[bytes]]] = [(file_offset, position, [])]
        parts = segments[0][2]
        pending: dict[str, int] = {}
        table = self.topic_queue_table
        pack = HEADER.pack
        store_host = self.store_host
        appended: list[AppendedMessage] = []
        append_result = appended.append
        magic = mf.MESSAGE_MAGIC_CODE
        for message, key, crc, tail, length in batch:
            if position + length + mf.END_FILE_MIN_BLANK_LENGTH > file_size:
                # END_OF_FILE (spec store §2 doAppend step 7, TV4): blank record, next file.
                parts.append(BLANK.pack(file_size - position, mf.BLANK_MAGIC_CODE))
                file_offset += file_size
                position = 0
                new_offsets.append(file_offset)
                parts = []
                segments.append((file_offset, 0, parts))
            queue_offset = pending.get(key)
            if queue_offset is None:
                queue_offset = table.get(key, 0)
            physical_offset = file_offset + position
            body = message.body
            sys_flag = message.sys_flag
            parts += (pack(length, magic, crc, message.queue_id, message.flag, queue_offset, physical_offset,
                           sys_flag, message.born_timestamp, message.born_host, store_timestamp, store_host,
                           message.reconsume_times, 0, len(body)),
                      body, tail)
            if not sys_flag & TRANSACTION_PREPARED_TYPE:   # only NOT / COMMIT take a queue offset (§2 step 9)
                pending[key] = queue_offset + 1
            append_result(AppendedMessage(physical_offset, queue_offset, length))
            position += length
        for offset in new_offsets:   # may raise OSError: nothing has been written yet
            queue.create_file(offset)
        for index, (file_offset, start, data_parts) in enumerate(segments):
            mapped = queue.find_mapped_file_by_offset(file_offset)
            data = b"".join(data_parts)
            mapped.write(start, data)
            # every segment but the last ends with the blank record: that file is full
            mapped.wrote_position = start + len(data) if index == len(segments) - 1 else file_size
            mapped.store_timestamp = store_timestamp
        table.update(pending)
        return AppendedBatch(start_offset, file_offset + position, appended)

    # -- read ------------------------------------------------------------------------------------

    def get_min_offset(self) -> int:
        """First readable physical offset (-1 when empty)."""
        return self.mapped_file_queue.get_min_offset()

    def get_max_offset(self) -> int:
        return self.mapped_file_queue.get_max_offset()

    def roll_next_file(self, offset: int) -> int:
        return self.mapped_file_queue.roll_next_file(offset)

    def get_message(self, offset: int, size: int) -> bytes | None:
        """The `size` bytes at `offset`, None when they are not (or no longer) readable."""
        mapped = self.mapped_file_queue.find_mapped_file_by_offset(offset)
        selected = mapped.select_mapped_buffer(offset - mapped.file_from_offset, size) if mapped else None
        return selected[1] if selected is not None and len(selected[1]) == size else None

    def read_store_timestamp(self, offset: int) -> int | None:
        data = self.get_message(offset + mf.STORE_TIMESTAMP_POS, 8)
        return int.from_bytes(data, "big", signed=True) if data is not None else None

    def gather(self, offsets: np.ndarray, sizes: np.ndarray) -> bytes | None:
        """The records at `offsets` back to back: one slice per run of adjacent records
        (records never span files), so contiguous batches cost one copy."""
        if len(offsets) == 0:
            return b""
        file_size = self.mapped_file_queue.mapped_file_size
        ends = offsets + sizes
        breaks = np.flatnonzero((offsets[1:] != ends[:-1])
                                | (offsets[1:] // file_size != offsets[:-1] // file_size)) + 1
        run_starts = offsets[np.concatenate(([0], breaks))].tolist()
        run_ends = ends[np.concatenate((breaks - 1, [len(offsets) - 1]))].tolist()
        held: dict[int, MappedFile] = {}
        try:
            parts = []
            for start, end in zip(run_starts, run_ends, strict=True):
                base = start - start % file_size
                mapped = held.get(base)
                if mapped is None:
                    mapped = self.mapped_file_queue.find_mapped_file_by_offset(start)
                    if mapped is None or not mapped.hold():
                        return None
                    held[base] = mapped
                if end - base > mapped.read_position():
                    return None
                parts.append(mapped.mm[start - base:end - base])
            return parts[0] if len(parts) == 1 else b"".join(parts)
        except ValueError:
            return None
        finally:
            for mapped in held.values():
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
        self._refuse_if_valid_records_follow(files, index, position)
        process_offset = files[index].file_from_offset + position
        queue.set_flushed_where(process_offset)
        queue.truncate_dirty_files(process_offset)
        last = queue.last_file()
        if last is not None:
            last.store_timestamp = checkpoint.physic_msg_timestamp
        return process_offset, scan_start

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
        """A torn tail is only ever followed by garbage. A complete record (magic, size,
        physical offset and CRC all right) after the invalid one means the damage is in the
        middle: truncating would drop acknowledged messages, so the store is refused."""
        mapped = files[index]
        later = _find_valid_record(mapped, position + 1)
        if later is None and index + 1 < len(files):
            following = files[index + 1]
            if parse_record(following.mm, 0, following.file_size, following.file_from_offset, True)[0] > 0:
                later = following.file_from_offset
        if later is not None:
            raise StoreError(
                f"{mapped.path}: invalid record at position {position} (offset "
                f"{mapped.file_from_offset + position}) but a complete record follows at offset {later}: "
                "the CommitLog is corrupt beyond a torn tail; refusing to truncate it")

    def close(self) -> None:
        self.mapped_file_queue.close()


_MIN_RECORD = mf.FIXED_OVERHEAD + 1


def parse_record(buffer, position: int, file_size: int, file_from_offset: int, check_crc: bool
                 ) -> tuple[int, DispatchRequest | None]:
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


def appended_requests(batch: list[EncodedMessage], appended: AppendedBatch, store_timestamp: int
                      ) -> list[DispatchRequest]:
    """The DispatchRequests parse_record would read back from the records just appended."""
    requests = []
    for (message, _, _, _, length), stored in zip(batch, appended.messages, strict=True):
        properties = message.properties
        tags = properties.get(mf.PROPERTY_TAGS)
        requests.append(DispatchRequest(
            message.topic, message.queue_id, stored.physical_offset, length, tags_code(tags) if tags else 0,
            store_timestamp, stored.queue_offset, properties.get(mf.PROPERTY_KEYS, ""),
            properties.get(mf.PROPERTY_UNIQ_KEY, ""), message.sys_flag))
    return requests


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


_TAGS_CODES: dict[str, int] = {}


def tags_code(tags: str) -> int:
    """Cached tags hash code: a store sees few distinct tags."""
    code = _TAGS_CODES.get(tags)
    if code is None:
        code = mf.tags_hash_code(tags)
        if len(_TAGS_CODES) < 65536:
            _TAGS_CODES[tags] = code
    return code
