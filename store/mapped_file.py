"""MappedFile: one fixed-size memory-mapped store file named by its start offset (spec store §5.2).

Writes go straight to the file's pages (no TransientStorePool), so committed == wrote and the
read position is the wrote position: through the map, or for CommitLog appends under ASYNC flush
through the file (`write_through_file`, pwrite into the page cache the map shares, with one fd
kept while the file is mapped). Readers `hold()` the file
while they copy bytes out of it; `destroy()` unmaps and deletes it once no reader holds it, or
forcibly after `interval_forcibly` ms (spec store §5.2 shutdown, TV9).

Every read or write of the mapping is an access (`_begin_access` .. `_end_access`): the mapping
is never closed under one (closing it while another thread copies from it crashes the process).
A file given a MappedFileLru (ConsumeQueue files) reports its accesses to it (at most one a
second, LRU_TOUCH_INTERVAL_S: a pull costs no LRU update), may be unmapped between them
(`unmap_if_idle`, once flushed) and maps itself again on the next one.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rmq.record_columns import RecordColumns, RecordParts, gather
from rmq.store.private_files import open_private

if TYPE_CHECKING:
    from rmq.store.mapped_file_lru import MappedFileLru

OS_PAGE_SIZE = 4096
FILE_NAME_DIGITS = 20
LRU_TOUCH_INTERVAL_S = 1.0   # LRU order and idle times are exact to within this
# read_records copies runs of one length by one numpy gather from this many on: measured on 200 B
# records, the gather costs ≈ 30 µs to set up and 0.2 µs a run, slices 0.4 µs a run (equal at ≈ 128)
MIN_VECTOR_RUNS = 128


def offset_to_file_name(offset: int) -> str:
    """UtilAll.offset2FileName: the offset zero-padded to 20 digits."""
    return str(offset).zfill(FILE_NAME_DIGITS)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class MappedFile:
    def __init__(self, path: Path, file_size: int, *, create: bool = False,
                 preallocate: bool = False, preallocate_step: int = 0,
                 lru: MappedFileLru | None = None) -> None:
        """`preallocate`: reserve the file's blocks at creation (ENOSPC as OSError, never SIGBUS
        later). With a `preallocate_step` they are reserved step by step ahead of the writes
        instead of all at once (also for a file loaded again), so an idle file reserves one step:
        2,000 topics x 4 queues of 6 MB ConsumeQueue files reserved 48 GB up front. With an `lru`
        the file is unmapped when it bounds the mapped files (see the module docstring)."""
        self.path = path
        self.file_size = file_size
        self.preallocate_step = preallocate_step
        self._reserved = 0 if preallocate_step else file_size   # bytes whose blocks are reserved
        self.file_from_offset = int(path.name)
        self.wrote_position = 0
        self.flushed_position = 0
        self.store_timestamp = 0
        self._ref_count = 1
        self._available = True
        self._cleaned = False
        self._first_shutdown_timestamp = 0
        self._ref_lock = threading.Lock()
        self._lru = lru
        self._users = 0            # accesses under way: the mapping is not closed under them
        self._unmapped = False     # the LRU closed the mapping; the next access maps the file again
        self._write_fd: int | None = None   # write_through_file's, kept while the mapping is
        self.mm = self._open(create, preallocate)
        self._touched_at = time.monotonic()
        if lru is not None:
            lru.touch(self)

    def _open(self, create: bool, preallocate: bool) -> mmap.mmap:
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = open_private(self.path, flags)
        try:
            if os.fstat(fd).st_size != self.file_size:
                allocate_file(fd, self.file_size, preallocate and not self.preallocate_step)
            if create and self.preallocate_step:
                self._reserve_blocks(fd, min(self.preallocate_step, self.file_size))
            return mmap.mmap(fd, self.file_size)
        except OSError:
            if create:
                self.path.unlink(missing_ok=True)
            raise
        finally:
            # The map keeps the file; no fd is held (a broker with thousands of idle ConsumeQueue
            # files would otherwise hold one each and run out: 2,000 topics x 4 queues = 8,000).
            os.close(fd)

    # -- positions -------------------------------------------------------------------------

    @property
    def committed_position(self) -> int:
        return self.wrote_position

    def read_position(self) -> int:
        return self.wrote_position

    def set_positions(self, position: int) -> None:
        self.wrote_position = self.flushed_position = position

    def is_full(self) -> bool:
        return self.wrote_position >= self.file_size

    def remaining(self) -> int:
        return self.file_size - self.wrote_position

    # -- write / flush -----------------------------------------------------------------------

    def _begin_access(self) -> mmap.mmap:
        """The mapping for one read or write, mapped again when the LRU had closed it; end the
        access with `_end_access`. Neither the LRU nor close/destroy close the mapping before
        then. A closed or destroyed file gives its closed mapping: using it raises ValueError."""
        with self._ref_lock:
            remapped = self._unmapped and not self._cleaned
            if remapped:
                self.mm = self._open(create=False, preallocate=False)
                self._unmapped = False
            self._users += 1
            mm = self.mm
        now = time.monotonic()
        if self._lru is not None and not self._cleaned and (
                remapped or now - self._touched_at >= LRU_TOUCH_INTERVAL_S):
            self._touched_at = now
            try:
                self._lru.touch(self)
            except BaseException:
                self._end_access()
                raise
        return mm

    def _end_access(self) -> None:
        with self._ref_lock:
            self._users -= 1
            if self._users == 0 and self._cleaned:
                self._close_mapping()

    def unmap_if_idle(self) -> bool:
        """Flush (fdatasync), then close the mapping and with it the fd Python's mmap keeps,
        unless an access is under way or bytes were written after the flush. True when the file
        holds no mapping afterwards (also when it already held none or was closed)."""
        if self._unmapped or self._cleaned:
            return True
        self.flush(0)
        with self._ref_lock:
            if self._cleaned or self._unmapped:
                return True
            if self._users or self.flushed_position < self.read_position():
                return False
            try:
                self.mm.close()
            except BufferError:   # a view of it is still alive
                return False
            self._close_write_fd()
            self._unmapped = True
            return True

    def is_mapped(self) -> bool:
        return not (self._unmapped or self._cleaned)

    def write(self, position: int, data: bytes) -> None:
        if position + len(data) > self._reserved:
            self._reserve(position + len(data))
        mm = self._begin_access()
        try:
            mm[position:position + len(data)] = data
        finally:
            self._end_access()

    def write_through_file(self, position: int, data: bytes) -> None:
        """`write` through the file (pwrite) instead of the map, for CommitLog appends: the kernel
        copies the bytes into the page cache the map shares (readers see them through it), new
        pages without the page fault per page of a write to the map, which first fills the page
        with zeros (RocketMQ's transientStorePool commit writes through the file too)."""
        if position + len(data) > self._reserved:
            self._reserve(position + len(data))
        self._begin_access()      # the fd is closed with the mapping, never under an access
        try:
            fd = self._write_fd
            if fd is None or self._cleaned:   # no call per append once the fd is open
                fd = self._file_fd()
            view = memoryview(data)
            while view:
                written = os.pwrite(fd, view, position)
                view, position = view[written:], position + written
        finally:
            self._end_access()

    def _file_fd(self) -> int:
        """The fd of write_through_file and read_through_file, under an access."""
        if self._cleaned:
            raise ValueError(f"{self.path} is closed")
        if self._write_fd is None:
            # kept open, not opened per write: closing a file on FUSE or NFS flushes it
            # (a slow disk made every put as slow as its fsync)
            self._write_fd = os.open(self.path, os.O_RDWR)
        return self._write_fd

    def clear_from(self, position: int) -> None:
        """Zero the file from `position` to its last non-zero byte (what recovery truncated away),
        then drop the scanned pages from this process's memory. A barely used file is neither
        rewritten whole nor left resident: a start-up with 800 ConsumeQueue files zeroed 6 MB each
        (4.7 GB resident and written back)."""
        end = self._data_end(position)
        mm = self._begin_access()
        try:
            tail = np.frombuffer(mm, np.uint8, count=end - position, offset=position)
            nonzero = np.flatnonzero(tail)
            del tail
            if len(nonzero):
                self.write(position, bytes(int(nonzero[-1]) + 1))
            start = position - position % mmap.PAGESIZE
            mm.madvise(mmap.MADV_DONTNEED, start, self.file_size - start)
        finally:
            self._end_access()

    def _data_end(self, position: int) -> int:
        """End of the file's last data region after `position` (SEEK_DATA / SEEK_HOLE: holes and
        never-written reserved blocks read as zeros and need no scan); the file size when the
        filesystem cannot tell."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            end, offset = position, position
            while offset < self.file_size:
                try:
                    start = os.lseek(fd, offset, os.SEEK_DATA)
                except OSError as error:
                    if error.errno == errno.ENXIO:     # no data after offset
                        break
                    return self.file_size
                offset = end = min(os.lseek(fd, start, os.SEEK_HOLE), self.file_size)
            return max(end, position)
        finally:
            os.close(fd)

    def append(self, data: bytes) -> bool:
        position = self.wrote_position
        if position + len(data) > self.file_size:
            return False
        self.write(position, data)
        self.wrote_position = position + len(data)
        return True

    def is_able_to_flush(self, least_pages: int) -> bool:
        """isAbleToFlush (spec store §5.2, TV7): full files always flush; leastPages 0 = any dirty data."""
        flushed, write = self.flushed_position, self.read_position()
        if self.is_full() and write > flushed:
            return True
        if least_pages > 0:
            return write // OS_PAGE_SIZE - flushed // OS_PAGE_SIZE >= least_pages
        return write > flushed

    def flush(self, least_pages: int) -> int:
        """Make the bytes up to the read position durable. fdatasync writes back the file's dirty
        pages, those dirtied through the map included (Linux), as msync(MS_SYNC) would, but it
        releases the GIL: mmap.flush holds it through the msync, so every other thread of the
        process (the broker's gRPC handlers too) stood still for the whole disk write. The file
        is opened for the call (no fd is kept open per file)."""
        if self.is_able_to_flush(least_pages) and self.hold():
            try:
                value = self.read_position()
                if value > self.flushed_position:
                    fd = os.open(self.path, os.O_RDWR)
                    try:
                        os.fdatasync(fd)
                    finally:
                        os.close(fd)
                self.flushed_position = value
            finally:
                self.release()
        return self.flushed_position

    # -- read --------------------------------------------------------------------------------

    def read(self, position: int, size: int) -> bytes:
        mm = self._begin_access()
        try:
            return mm[position:position + size]
        finally:
            self._end_access()

    def read_through_file(self, starts: np.ndarray, ends: np.ndarray) -> bytes:
        """`read_records` through the file (one pread per run of adjacent records) instead of the
        map: the kernel copies the bytes out of the page cache, which never enters this process's
        resident memory (the timer enqueue task reads each parked record back once: 1,000,000 of
        them read through the map kept ~100 MiB of CommitLog resident)."""
        self._begin_access()      # the fd is closed with the mapping, never under an access
        try:
            fd = self._write_fd
            if fd is None or self._cleaned:   # no call per append once the fd is open
                fd = self._file_fd()
            run_starts, run_ends = _runs(starts, ends)
            parts = [os.pread(fd, end - start, start) for start, end in zip(run_starts.tolist(),
                                                                           run_ends.tolist(), strict=True)]
        finally:
            self._end_access()
        if any(len(part) != end - start for part, start, end in zip(parts, run_starts.tolist(),
                                                                   run_ends.tolist(), strict=True)):
            raise ValueError(f"{self.path} is shorter than its records")
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def read_records(self, starts: np.ndarray, ends: np.ndarray) -> bytes | memoryview:
        """The bytes [start, end) of each record, back to back, under one access: one slice when
        they are contiguous, else one per run of adjacent records; runs of one length (records of
        one size interleaved with other queues'), from MIN_VECTOR_RUNS of them on, are copied by
        one numpy gather (the view of the mapping lives only for the copy), answered as a
        memoryview of the gathered copy: a second copy into bytes costs more than the gather."""
        mm = self._begin_access()
        try:
            if len(starts) == 1 or bool((starts[1:] == ends[:-1]).all()):
                return mm[int(starts[0]):int(ends[-1])]
            run_starts, run_ends = _runs(starts, ends)
            lengths = run_ends - run_starts
            if len(run_starts) >= MIN_VECTOR_RUNS and bool((lengths == lengths[0]).all()):
                view = np.lib.stride_tricks.sliding_window_view(np.frombuffer(mm, dtype=np.uint8),
                                                                int(lengths[0]))
                gathered: np.ndarray = view[run_starts]
                return gathered.reshape(-1).data
            pairs = zip(run_starts.tolist(), run_ends.tolist(), strict=True)
            return b"".join([mm[start:end] for start, end in pairs])
        finally:
            self._end_access()

    def read_columns(self, starts: np.ndarray, sizes: np.ndarray, parts: RecordParts) -> RecordColumns:
        """The `parts` of the records at `starts` of `sizes`, gathered column-wise under one access
        (rmq.record_columns.gather; no view of the mapping outlives it)."""
        mm = self._begin_access()
        try:
            return gather(np.frombuffer(mm, dtype=np.uint8), starts, sizes, parts)
        finally:
            self._end_access()

    def select_mapped_buffer(self, position: int, size: int | None = None) -> tuple[int, bytes] | None:
        """selectMappedBuffer (spec store §5.2, TV8): (global offset, bytes from `position` up to
        the read position, or `size` bytes), None outside [0, readPosition) or when destroyed."""
        read_position = self.read_position()
        if not 0 <= position < read_position or not self.hold():
            return None
        try:
            end = read_position if size is None else min(position + size, read_position)
            return self.file_from_offset + position, self.read(position, end - position)
        except ValueError:   # unmapped forcibly under us
            return None
        finally:
            self.release()

    def last_modified_timestamp(self) -> int:
        try:
            return os.stat(self.path).st_mtime_ns // 1_000_000
        except FileNotFoundError:
            return 0

    # -- reference counting / destroy -------------------------------------------------------

    def hold(self) -> bool:
        with self._ref_lock:
            if not self._available:
                return False
            self._ref_count += 1
            return True

    def release(self) -> None:
        with self._ref_lock:
            self._ref_count -= 1
            if self._ref_count > 0 or self._cleaned:
                return
            self._cleaned = True
        self._close()

    def shutdown(self, interval_forcibly_ms: int) -> None:
        if self._available:
            self._available = False
            self._first_shutdown_timestamp = now_ms()
            self.release()
        elif self._ref_count > 0 and now_ms() - self._first_shutdown_timestamp >= interval_forcibly_ms:
            self._ref_count = -1000 - self._ref_count
            self.release()

    def destroy(self, interval_forcibly_ms: int) -> bool:
        """Unmap and delete the file; False while readers still hold it (retry later)."""
        self.shutdown(interval_forcibly_ms)
        if not self._cleaned:
            return False
        self.path.unlink(missing_ok=True)
        return True

    def close(self) -> None:
        """Unmap without deleting (store shutdown)."""
        self._available = False
        with self._ref_lock:
            if self._cleaned:
                return
            self._cleaned = True
        self._close()

    def _reserve(self, end: int) -> None:
        """Reserve blocks up to at least `end`, a step ahead (OSError ENOSPC when the disk is full)."""
        fd = os.open(self.path, os.O_RDWR)
        try:
            self._reserve_blocks(fd, min(self.file_size, max(end, self._reserved + self.preallocate_step)))
        finally:
            os.close(fd)

    def _reserve_blocks(self, fd: int, end: int) -> None:
        try:
            os.posix_fallocate(fd, self._reserved, end - self._reserved)
            self._reserved = end
        except OSError as error:
            if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            self._reserved = self.file_size    # the filesystem cannot reserve: write as before

    def _close(self) -> None:
        """Once `_cleaned`: unmap now, or when the last access under way ends."""
        if self._lru is not None:
            self._lru.forget(self)
        with self._ref_lock:
            if self._users == 0:
                self._close_mapping()

    def _close_mapping(self) -> None:
        self._close_write_fd()
        try:
            self.mm.close()
        except BufferError:
            pass   # a reader still has a view; the map is freed with it

    def _close_write_fd(self) -> None:
        if self._write_fd is not None:
            os.close(self._write_fd)
            self._write_fd = None

    def __repr__(self) -> str:
        return f"MappedFile({self.path.name}, wrote={self.wrote_position})"


def _runs(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runs of adjacent records among the records [start, end) (in order): their starts, ends."""
    breaks = np.flatnonzero(starts[1:] != ends[:-1]) + 1
    return starts[np.concatenate(([0], breaks))], ends[np.concatenate((breaks - 1, [len(starts) - 1]))]


def allocate_file(fd: int, size: int, preallocate: bool) -> None:
    """Size the file. Preallocated files reserve their blocks, so a full filesystem surfaces
    here as OSError (ENOSPC) instead of as SIGBUS on a later page fault in a sparse file."""
    if preallocate and hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, size)
            return
        except OSError as error:
            if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
    os.ftruncate(fd, size)


def open_reserved(path: Path, size: int) -> int:
    """An O_RDWR fd of a file of `size` bytes (0600), created with its blocks reserved when it is
    new or of another size, so no page of it faults (mapped) or fails to write (pwrite) on a full
    filesystem. Raises OSError (ENOSPC), leaving no file, when there is no room for it."""
    fd = open_private(path, os.O_RDWR | os.O_CREAT)
    try:
        if os.fstat(fd).st_size != size:
            try:
                allocate_file(fd, size, preallocate=True)
            except OSError:
                path.unlink(missing_ok=True)
                raise
    except BaseException:
        os.close(fd)
        raise
    return fd


def map_reserved(path: Path, size: int) -> mmap.mmap:
    """Map a file made by `open_reserved` (the map keeps the file; no fd is held)."""
    fd = open_reserved(path, size)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
