"""TimerLog (RocketMQ 5 store/timer/TimerLog, our own layout: docs/internals/timer.md §TimerLog):
one fixed-size entry per timer-queue offset, in segment files (written by pwrite, read by pread:
never mapped, so they do not count in the broker's resident memory) under
`<store>/timerlog/`, each named by the first offset it holds. An entry points at its timer
message in the CommitLog and at the previous entry of the same wheel slot, so a slot's entries
form a chain read back from the slot's last. Only the entries' state byte is rewritten in place
(pending -> delivering -> delivered, or recalled); everything else is appended once.

Entry index == offset in the timer topic's queue, so an entry is found without a table, and
re-enqueueing after a crash finds what is already there (docs/internals/timer.md §Recovery).
Segments wholly below the oldest entry still pending are deleted (retention). A segment's blocks
are reserved when it is created (posix_fallocate), so no page of it faults on a full filesystem (a
SIGBUS on tmpfs); the send path creates the segments the next timers need before accepting them
(`reserve`), so a full disk is a refusal there, not a failed chaining later."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rmq.store.mapped_file import open_reserved
from rmq.store.private_files import make_dirs

ENTRY_DTYPE = np.dtype([("prev", "<i8"), ("deliver_ms", "<i8"), ("phys", "<i8"), ("size", "<i4"),
                        ("account", "<u4"), ("state", "u1"), ("pad", "V3"), ("topic", "<u4")])
ENTRY_SIZE = ENTRY_DTYPE.itemsize   # 40 bytes
STATE_POSITION = 32   # offset of "state" in ENTRY_DTYPE
ENTRIES_PER_SEGMENT = 1 << 16       # 2.5 MiB per segment file, all reserved at creation
NO_ENTRY = -1


class EntryState(enum.IntEnum):
    EMPTY = 0        # never written (a sparse file reads as zeros)
    PENDING = 1      # on the wheel, waiting for its time
    DELIVERING = 2   # its delivery is being stored: after a crash, ask the index whether it was
    DELIVERED = 3
    RECALLED = 4
    MARKER = 5       # the timer queue's record at this offset is not a timer (a recall request)


@dataclass(frozen=True, slots=True)
class TimerEntry:
    index: int
    prev: int
    deliver_ms: int
    phys: int
    size: int
    account: int
    state: EntryState
    topic: int = 0   # CRC32 of the real topic's name (pending timers per topic)


@dataclass(frozen=True)
class PendingEntries:
    indexes: np.ndarray    # int64: their timer-queue offsets, ascending
    accounts: np.ndarray   # uint32: their producers' account codes
    topics: np.ndarray     # uint32: their real topics' codes
    phys: np.ndarray       # int64: their CommitLog offsets

    def commit_log_floor(self, otherwise: int) -> int:
        """The lowest CommitLog offset a pending entry needs (`otherwise` when none is pending)."""
        return int(self.phys.min()) if len(self.phys) else otherwise


class TimerLog:
    def __init__(self, directory: Path, entries_per_segment: int = ENTRIES_PER_SEGMENT) -> None:
        self.directory = directory
        self.per_segment = entries_per_segment
        self._segments: dict[int, int] = {}   # first index -> the segment file's fd
        self._dirty: set[int] = set()         # segments written since the last flush
        make_dirs(directory)
        for path in sorted(directory.iterdir()):
            if path.name.isdigit():
                self._segments[int(path.name)] = self._open(path)

    def _open(self, path: Path) -> int:
        """Open a segment, created with its blocks reserved (OSError when there is no room).
        Entries are written by pwrite and read by pread, never through a mapping: the page cache
        holds them, the broker's resident memory does not (1,000,000 pending timers mapped 38 MiB)."""
        return open_reserved(path, self.per_segment * ENTRY_SIZE)

    def _segment(self, index: int, create: bool) -> tuple[int | None, int]:
        first = index - index % self.per_segment
        fd = self._segments.get(first)
        if fd is None and create:
            fd = self._segments[first] = self._open(self.directory / f"{first:020d}")
        return fd, (index - first) * ENTRY_SIZE

    def _write(self, index: int, position_in_entry: int, data: bytes, create: bool) -> None:
        fd, position = self._segment(index, create)
        if fd is not None:
            os.pwrite(fd, data, position + position_in_entry)   # reserved blocks: never short
            self._dirty.add(index - index % self.per_segment)

    def reserve(self, first: int, last: int) -> None:
        """Create the segments holding entries `first`..`last` (OSError when there is no room)."""
        for index in range(first - first % self.per_segment, last + 1, self.per_segment):
            self._segment(index, True)

    def write(self, entry: TimerEntry) -> None:
        record = np.zeros(1, ENTRY_DTYPE)
        record[0] = (entry.prev, entry.deliver_ms, entry.phys, entry.size, entry.account, entry.state, b"",
                     entry.topic)
        self._write(entry.index, 0, record.tobytes(), create=True)

    def read(self, index: int) -> TimerEntry | None:
        fd, position = self._segment(index, False)
        if fd is None:
            return None
        fields = np.frombuffer(os.pread(fd, ENTRY_SIZE, position), ENTRY_DTYPE, 1)[0]
        state = EntryState(int(fields["state"]))
        if state is EntryState.EMPTY:
            return None
        return TimerEntry(index, int(fields["prev"]), int(fields["deliver_ms"]), int(fields["phys"]),
                          int(fields["size"]), int(fields["account"]), state, int(fields["topic"]))

    def set_state(self, index: int, state: EntryState) -> None:
        self._write(index, STATE_POSITION, bytes((int(state),)), create=False)

    def pending(self) -> PendingEntries:
        """Every entry pending or being delivered: one vector scan of each segment (the figures
        the broker counts from on start, the retention floors)."""
        indexes, accounts, topics, phys = [], [], [], []
        for first, fd in sorted(self._segments.items()):
            entries = np.frombuffer(os.pread(fd, self.per_segment * ENTRY_SIZE, 0), ENTRY_DTYPE)
            live = np.flatnonzero((entries["state"] == EntryState.PENDING)
                                  | (entries["state"] == EntryState.DELIVERING))
            indexes.append(live + first)
            accounts.append(entries["account"][live])
            topics.append(entries["topic"][live])
            phys.append(entries["phys"][live])
        if not indexes:
            return PendingEntries(np.zeros(0, np.int64), np.zeros(0, np.uint32), np.zeros(0, np.uint32),
                                  np.zeros(0, np.int64))
        return PendingEntries(np.concatenate(indexes), np.concatenate(accounts), np.concatenate(topics),
                              np.concatenate(phys))

    def delete_below(self, index: int) -> int:
        """Delete the segments holding only entries below `index` (none of them pending).
        Returns how many were deleted."""
        gone = [first for first in self._segments if first + self.per_segment <= index]
        for first in gone:
            os.close(self._segments.pop(first))
            self._dirty.discard(first)
            (self.directory / f"{first:020d}").unlink(missing_ok=True)
        return len(gone)

    def flush(self) -> None:
        """Make the entries written so far durable (fdatasync of each segment written since the
        last flush). On a store thread: the send path may add a segment meanwhile (`reserve`, on
        the loop)."""
        for first in list(self._dirty):
            self._dirty.discard(first)
            fd = self._segments.get(first)
            if fd is not None:
                os.fdatasync(fd)

    def close(self) -> None:
        for fd in self._segments.values():
            os.close(fd)
        self._segments.clear()
        self._dirty.clear()
