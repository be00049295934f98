"""IndexFile / IndexService: hash index from message keys to CommitLog offsets (spec store §7, TV24).

File layout: 40-byte header (beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset,
hashSlotCount, indexCount), `hash_slot_num` 4-byte slots holding the newest entry number,
then `index_num` 20-byte entries (keyHash int, phyOffset long, timeDiff int seconds, prevIndex int).
Entry numbers start at 1; slot value 0 means empty. Files are named by creation time.
"""

from __future__ import annotations

import mmap
import os
import struct
import threading
import time
from pathlib import Path

from rmq import message_format as mf
from rmq.store.errors import StoreError
from rmq.store.mapped_file import allocate_file
from rmq.store.private_files import make_dirs, open_private
from rmq.store.results import DispatchRequest

INDEX_HEADER_SIZE = 40
INDEX_ENTRY_SIZE = 20
HASH_SLOT_SIZE = 4
INVALID_INDEX = 0
_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")
_SLOT = struct.Struct(">i")
_INT_MAX = 2**31 - 1


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


def key_hash(key: str) -> int:
    """abs(Java String.hashCode), MIN_VALUE -> 0 (IndexFile#indexKeyHashMethod)."""
    code = abs(mf.tags_hash_code(key))
    return 0 if code > _INT_MAX else code


def build_key(topic: str, key: str) -> str:
    """IndexService#buildKey."""
    return f"{topic}#{key}"


class IndexFile:
    def __init__(self, path: Path, hash_slot_num: int, index_num: int) -> None:
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        size = index_file_size(hash_slot_num, index_num)
        fd = open_private(path, os.O_RDWR | os.O_CREAT)
        try:
            actual = os.fstat(fd).st_size
            if actual not in (0, size):
                raise StoreError(f"{path}: size {actual} differs from the configured index file size {size}")
            if actual == 0:
                allocate_file(fd, size, preallocate=True)
            self.mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd      # kept for fdatasync (see flush)
        self.begin_timestamp: int
        self.end_timestamp: int
        self.begin_phy_offset: int
        self.end_phy_offset: int
        self.hash_slot_count: int
        self.index_count: int
        (self.begin_timestamp, self.end_timestamp, self.begin_phy_offset, self.end_phy_offset,
         self.hash_slot_count, self.index_count) = _HEADER.unpack_from(self.mm, 0)
        if self.index_count == 0:
            self.index_count = 1
        self._entries_start = INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE

    def put_key(self, key: str, phy_offset: int, store_timestamp: int) -> bool:
        """IndexFile#putKey; False when the file is full."""
        index_count = self.index_count
        if index_count >= self.index_num:
            return False
        hashed = key_hash(key)
        mm = self.mm
        abs_slot_pos = INDEX_HEADER_SIZE + (hashed % self.hash_slot_num) * HASH_SLOT_SIZE
        slot_value, = _SLOT.unpack_from(mm, abs_slot_pos)
        if slot_value <= INVALID_INDEX or slot_value > index_count:
            slot_value = INVALID_INDEX
        begin_timestamp = self.begin_timestamp
        if begin_timestamp <= 0:
            time_diff = 0
        else:
            time_diff = min(max((store_timestamp - begin_timestamp) // 1000, 0), _INT_MAX)
        _ENTRY.pack_into(mm, self._entries_start + index_count * INDEX_ENTRY_SIZE,
                         hashed, phy_offset, time_diff, slot_value)
        _SLOT.pack_into(mm, abs_slot_pos, index_count)
        if index_count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        if slot_value == INVALID_INDEX:
            self.hash_slot_count += 1
        self.index_count = index_count + 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        return True

    def write_header(self) -> None:
        """The header lives in memory and reaches the file on flush/close (IndexHeader#updateByteBuffer);
        after a crash, files newer than the checkpoint are dropped anyway (TV12)."""
        _HEADER.pack_into(self.mm, 0, self.begin_timestamp, self.end_timestamp, self.begin_phy_offset,
                          self.end_phy_offset, self.hash_slot_count, self.index_count)

    def is_time_matched(self, begin: int, end: int) -> bool:
        return (begin <= self.begin_timestamp <= end or begin <= self.end_timestamp <= end
                or (self.begin_timestamp <= begin and end <= self.end_timestamp))

    def select_phy_offsets(self, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """IndexFile#selectPhyOffset: walk the slot's chain, newest first."""
        found: list[int] = []
        hashed = key_hash(key)
        slot_value, = _SLOT.unpack_from(self.mm, INDEX_HEADER_SIZE + (hashed % self.hash_slot_num) * 4)
        if slot_value <= INVALID_INDEX or slot_value > self.index_count or self.index_count <= 1:
            return found
        entries_start = self._entries_start
        next_index = slot_value
        while len(found) < max_num:
            read_hash, phy_offset, time_diff, prev_index = _ENTRY.unpack_from(
                self.mm, entries_start + next_index * INDEX_ENTRY_SIZE)
            if time_diff < 0:
                break
            time_read = self.begin_timestamp + time_diff * 1000
            if read_hash == hashed and begin <= time_read <= end:
                found.append(phy_offset)
            if (prev_index <= INVALID_INDEX or prev_index > self.index_count or prev_index == next_index
                    or time_read < begin):
                break
            next_index = prev_index
        return found

    def flush(self) -> None:
        """fdatasync, not mmap.flush: the same pages reach the disk, but without holding the GIL
        (see MappedFile.flush)."""
        self.write_header()
        os.fdatasync(self._fd)

    def close(self) -> None:
        self.write_header()
        self._unmap()

    def destroy(self) -> None:
        self._unmap()
        self.path.unlink(missing_ok=True)

    def _unmap(self) -> None:
        self.mm.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class IndexService:
    """The list of index files; builds entries on dispatch and answers key queries."""

    def __init__(self, index_dir: Path, hash_slot_num: int, index_num: int) -> None:
        self.index_dir = index_dir
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.files: list[IndexFile] = []
        self._lock = threading.Lock()

    def load(self, last_exit_ok: bool, index_msg_timestamp: int) -> None:
        """IndexService#load (TV12): after an abnormal exit, files newer than the checkpoint are destroyed."""
        if not self.index_dir.is_dir():
            return
        for path in sorted(self.index_dir.iterdir()):
            if not (path.is_file() and path.name.isdigit()):
                raise StoreError(f"{path}: not an index file (expected a file named by its creation time)")
            index_file = IndexFile(path, self.hash_slot_num, self.index_num)
            if not last_exit_ok and index_file.end_timestamp > index_msg_timestamp:
                index_file.destroy()
                continue
            self.files.append(index_file)

    def build_index(self, request: DispatchRequest) -> None:
        """IndexService#buildIndex: UNIQ_KEY and every space-separated KEYS entry, as topic#key."""
        uniq_key, keys = request.uniq_key, request.keys
        if not (uniq_key or keys):
            return
        offset, timestamp, topic = request.commit_log_offset, request.store_timestamp, request.topic
        with self._lock:
            index_file = self.files[-1] if self.files else self._create_file()
            if offset < index_file.end_phy_offset:
                return   # already indexed (re-dispatch after recovery)
            for key in (uniq_key, *keys.split(mf.KEY_SEPARATOR)) if keys else (uniq_key,):
                if key and not index_file.put_key(full_key := f"{topic}#{key}", offset, timestamp):
                    index_file.flush()   # full: the key goes to a new file
                    index_file = self._create_file()
                    index_file.put_key(full_key, offset, timestamp)

    def _create_file(self) -> IndexFile:
        make_dirs(self.index_dir)
        stamp = time.time_ns() // 1_000_000
        path = self.index_dir / _time_name(stamp)
        while path.exists():
            stamp += 1
            path = self.index_dir / _time_name(stamp)
        index_file = IndexFile(path, self.hash_slot_num, self.index_num)
        self.files = [*self.files, index_file]
        return index_file

    def query_offsets(self, topic: str, key: str, max_num: int, begin: int, end: int) -> list[int]:
        """Physical offsets for topic#key, newest file first, at most max_num."""
        found: list[int] = []
        full_key = build_key(topic, key)
        for index_file in reversed(self.files):
            if index_file.is_time_matched(begin, end):
                found.extend(index_file.select_phy_offsets(full_key, max_num - len(found), begin, end))
            if len(found) >= max_num or index_file.begin_timestamp < begin:
                break
        return found

    def delete_expired_files(self, min_commit_log_offset: int) -> None:
        """Delete index files (never the last) whose entries all point below the CommitLog start."""
        with self._lock:
            keep = [f for f in self.files[:-1] if f.end_phy_offset >= min_commit_log_offset]
            for index_file in self.files[:-1]:
                if index_file.end_phy_offset < min_commit_log_offset:
                    index_file.destroy()
            self.files = keep + self.files[-1:]

    def delete_files_from(self, commit_log_offset: int) -> None:
        """Destroy the newest files that index records at or after commit_log_offset (the
        CommitLog was truncated there; re-dispatch indexes the surviving records again)."""
        with self._lock:
            while self.files and self.files[-1].end_phy_offset >= commit_log_offset:
                self.files[-1].destroy()
                self.files = self.files[:-1]

    def flush(self) -> None:
        with self._lock:
            for index_file in self.files:
                index_file.flush()

    def destroy(self) -> None:
        with self._lock:
            for index_file in self.files:
                index_file.destroy()
            self.files = []

    def close(self) -> None:
        for index_file in self.files:
            index_file.close()


def _time_name(stamp_ms: int) -> str:
    """yyyyMMddHHmmssSSS (local time, like RocketMQ)."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(stamp_ms / 1000)) + f"{stamp_ms % 1000:03d}"
