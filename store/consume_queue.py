"""ConsumeQueue: per (topic, queueId) index of the CommitLog, 20-byte entries (spec store §6, TV19).

Entry N of the logical queue lives at byte N * 20: commitLogOffset int64, size int32,
tagsCode int64, big-endian. Files live in `consumequeue/<topic>/<queueId>/`.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from rmq.store.config import CQ_STORE_UNIT_SIZE
from rmq.store.mapped_file import MappedFile
from rmq.store.mapped_file_lru import MappedFileLru
from rmq.store.mapped_file_queue import MappedFileQueue

ENTRY = struct.Struct(">qiq")
CQ_DTYPE = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])
# fillPreBlank entry: keeps logical offsets aligned when a queue starts past 0.
PRE_BLANK_SIZE = 0x7FFFFFFF
RECOVER_CHUNK_ENTRIES = 4096     # 80 KiB read at a time by recover
PREALLOCATE_STEP = 64 * 1024     # blocks reserved ahead of the writes (not the whole 6 MB file)
PRE_BLANK_ENTRY = ENTRY.pack(0, PRE_BLANK_SIZE, 0)


def entry_bytes(commit_log_offset: int, size: int, tags_code: int) -> bytes:
    return ENTRY.pack(commit_log_offset, size, tags_code)


class ConsumeQueue:
    def __init__(self, topic: str, queue_id: int, root: Path, mapped_file_size: int,
                 lru: MappedFileLru | None = None) -> None:
        """`lru`: the store's bound on mapped ConsumeQueue files (None: every file stays mapped)."""
        self.topic = topic
        self.queue_id = queue_id
        self.mapped_file_queue = MappedFileQueue(root / topic / str(queue_id), mapped_file_size,
                                                 preallocate=True, preallocate_step=PREALLOCATE_STEP, lru=lru)
        self.entries_per_file = mapped_file_size // CQ_STORE_UNIT_SIZE
        self.max_physic_offset = -1      # end (offset + size) of the last entry's record
        self.min_logic_offset = 0        # byte offset of the first valid entry

    def load(self) -> None:
        self.mapped_file_queue.load()

    # -- offsets ---------------------------------------------------------------------------------

    def get_min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def get_max_offset_in_queue(self) -> int:
        """The next logical offset to be written (one past the last entry)."""
        return self.mapped_file_queue.get_max_offset() // CQ_STORE_UNIT_SIZE

    def roll_next_file(self, index: int) -> int:
        return index + self.entries_per_file - index % self.entries_per_file

    # -- write -----------------------------------------------------------------------------------

    def put_entries(self, entries: np.ndarray, first_cq_offset: int) -> None:
        """Append consecutive entries (CQ_DTYPE) for logical offsets first_cq_offset onwards.
        Entries that continue the queue go into the last file with one write per file."""
        while len(entries):
            last = self.mapped_file_queue.last_file()
            if (last is not None and not last.is_full()
                    and first_cq_offset * CQ_STORE_UNIT_SIZE == last.file_from_offset + last.wrote_position):
                count = min(len(entries), last.remaining() // CQ_STORE_UNIT_SIZE)
                last.append(entries[:count].tobytes())
                self.max_physic_offset = int(entries["offset"][count - 1]) + int(entries["size"][count - 1])
            else:   # a new queue, a new file, or entries already present after recovery
                count = 1
                offset, size, tags_code = entries[0].tolist()
                self.put_message_position_info(offset, size, tags_code, first_cq_offset)
            entries, first_cq_offset = entries[count:], first_cq_offset + count

    def put_message_position_info(self, commit_log_offset: int, size: int, tags_code: int,
                                  cq_offset: int) -> None:
        """Append the entry for logical offset cq_offset; already present entries (re-dispatch
        after recovery) are skipped, gaps are filled with pre-blank entries."""
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        queue = self.mapped_file_queue
        files = queue.files
        if files:   # the common case first: the entry continues the last file, which has room for it
            last = files[-1]
            position = last.wrote_position
            if last.file_from_offset + position == expect and position + CQ_STORE_UNIT_SIZE <= last.file_size:
                last.write(position, ENTRY.pack(commit_log_offset, size, tags_code))   # append, room checked
                last.wrote_position = position + CQ_STORE_UNIT_SIZE
                self.max_physic_offset = commit_log_offset + size
                return
        if not files:
            self.min_logic_offset = expect
        elif expect < queue.get_max_offset():
            return
        self._fill_pre_blank(expect)
        queue.get_last_mapped_file(expect).append(ENTRY.pack(commit_log_offset, size, tags_code))
        self.max_physic_offset = commit_log_offset + size

    def _fill_pre_blank(self, expect: int) -> None:
        queue = self.mapped_file_queue
        while True:
            mapped = queue.get_last_mapped_file(expect)
            current = mapped.file_from_offset + mapped.wrote_position
            if current >= expect:
                return
            count = min(expect - current, mapped.remaining()) // CQ_STORE_UNIT_SIZE
            mapped.append(PRE_BLANK_ENTRY * count)

    # -- read ------------------------------------------------------------------------------------

    def get_entries(self, index: int, max_entries: int) -> np.ndarray | None:
        """Entries from logical offset `index` to at most the end of its file (getIndexBuffer)."""
        byte_offset = index * CQ_STORE_UNIT_SIZE
        mapped = self.mapped_file_queue.find_mapped_file_by_offset(byte_offset)
        if mapped is None or not mapped.hold():
            return None
        try:
            position = byte_offset - mapped.file_from_offset
            count = min((mapped.read_position() - position) // CQ_STORE_UNIT_SIZE, max_entries)
            if count <= 0:
                return None
            return np.frombuffer(mapped.read(position, count * CQ_STORE_UNIT_SIZE), CQ_DTYPE)
        except ValueError:
            return None
        finally:
            mapped.release()

    def get_entry(self, index: int) -> tuple[int, int, int] | None:
        entries = self.get_entries(index, 1)
        if entries is None:
            return None
        return int(entries["offset"][0]), int(entries["size"][0]), int(entries["tags_code"][0])

    # -- recovery --------------------------------------------------------------------------------

    def recover(self) -> None:
        """ConsumeQueue#recover: from the 3rd-last file, keep entries while offset >= 0 and size > 0."""
        queue = self.mapped_file_queue
        files = queue.files
        if not files:
            return
        index = max(len(files) - 3, 0)
        process_offset = files[index].file_from_offset
        for mapped in files[index:]:
            valid_count, last = _valid_entries(mapped)
            if last is not None and int(last["size"]) != PRE_BLANK_SIZE:
                self.max_physic_offset = int(last["offset"]) + int(last["size"])
            process_offset = mapped.file_from_offset + valid_count * CQ_STORE_UNIT_SIZE
            if valid_count < mapped.file_size // CQ_STORE_UNIT_SIZE:
                break
        queue.set_flushed_where(process_offset)
        queue.truncate_dirty_files(process_offset)

    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop entries whose record starts at or after phy_offset (truncateDirtyLogicFiles)."""
        queue = self.mapped_file_queue
        cut = queue.get_max_offset()
        for mapped in reversed(queue.files):
            entries = _file_entries(mapped, mapped.read_position())
            real = entries["size"] != PRE_BLANK_SIZE
            dirty = np.flatnonzero(real & (entries["offset"] >= phy_offset))
            if len(dirty) == 0:
                break
            cut = mapped.file_from_offset + int(dirty[0]) * CQ_STORE_UNIT_SIZE
            if dirty[0] > 0:
                break
        queue.truncate_dirty_files(cut)
        self.min_logic_offset = min(self.min_logic_offset, cut)
        last = self.get_entry(self.get_max_offset_in_queue() - 1) if cut > self.min_logic_offset else None
        self.max_physic_offset = last[0] + last[1] if last and last[1] != PRE_BLANK_SIZE else -1

    def correct_min_offset(self, min_commit_log_offset: int) -> None:
        """The first entry whose record still exists in the CommitLog becomes the minimum."""
        for mapped in self.mapped_file_queue.files:
            if mapped.file_from_offset + mapped.read_position() <= self.min_logic_offset:
                continue
            entries = _file_entries(mapped, mapped.read_position())
            valid = np.flatnonzero((entries["size"] != PRE_BLANK_SIZE)
                                   & (entries["offset"] >= min_commit_log_offset))
            start = max(self.min_logic_offset - mapped.file_from_offset, 0) // CQ_STORE_UNIT_SIZE
            valid = valid[valid >= start]
            if len(valid):
                self.min_logic_offset = mapped.file_from_offset + int(valid[0]) * CQ_STORE_UNIT_SIZE
                return
        self.min_logic_offset = self.mapped_file_queue.get_max_offset()

    def delete_expired_files(self, min_commit_log_offset: int, interval_forcibly_ms: int) -> int:
        """CleanConsumeQueueService: delete leading files whose entries all point below the
        CommitLog's first offset, then correct the minimum offset."""
        def expired(mapped: MappedFile) -> bool:
            last: int = struct.unpack(">q", mapped.read(mapped.file_size - CQ_STORE_UNIT_SIZE, 8))[0]
            return last < min_commit_log_offset

        deleted = self.mapped_file_queue.delete_files_below(expired, interval_forcibly_ms)
        self.correct_min_offset(min_commit_log_offset)
        return deleted

    def flush(self, least_pages: int) -> bool:
        return self.mapped_file_queue.flush(least_pages)

    def destroy(self) -> None:
        self.mapped_file_queue.destroy()
        self.max_physic_offset = -1
        self.min_logic_offset = 0

    def close(self) -> None:
        self.mapped_file_queue.close()


def _valid_entries(mapped: MappedFile) -> tuple[int, np.void | None]:
    """How many entries from the file's start are valid (offset >= 0, size > 0), and the last of
    them. Read in chunks up to the first invalid one: a barely used file costs one chunk, not
    its whole size (a start-up with thousands of queues read every 6 MB file whole)."""
    total = mapped.file_size // CQ_STORE_UNIT_SIZE
    valid, last = 0, None
    while valid < total:
        count = min(RECOVER_CHUNK_ENTRIES, total - valid)
        entries = np.frombuffer(mapped.read(valid * CQ_STORE_UNIT_SIZE, count * CQ_STORE_UNIT_SIZE), CQ_DTYPE)
        invalid = np.flatnonzero((entries["offset"] < 0) | (entries["size"] <= 0))
        found = int(invalid[0]) if len(invalid) else count
        if found:
            last = entries[found - 1]
        valid += found
        if found < count:
            break
    return valid, last


def _file_entries(mapped: MappedFile, limit: int) -> np.ndarray:
    count = limit // CQ_STORE_UNIT_SIZE
    return np.frombuffer(mapped.read(0, count * CQ_STORE_UNIT_SIZE), CQ_DTYPE)
