"""ReputMessageService: dispatches new CommitLog records to ConsumeQueues, the index and the
dispatch listeners (spec store §8), in CommitLog order, one dispatcher at a time.

Instead of RocketMQ's 1 ms sleep loop: a putting thread dispatches its own records right after
appending when no dispatch is running (`try_dispatch_appended`, no thread hand-off), otherwise
it wakes the service thread, which sleeps on the wake-up event when idle.

Dispatch ends at `end()`: the CommitLog's end, or a controller-mode SYNC_MASTER's confirm
offset (HAService, from `MessageStore.bound_reads` on), which may fall inside a record: a record
past it waits for the next wake-up."""

from __future__ import annotations

import logging
import mmap
import struct
import threading
from collections.abc import Callable

from rmq import message_format as mf
from rmq.store.commit_log import CommitLog, parse_record
from rmq.store.dispatch_batch import DispatchBatch
from rmq.store.mapped_file import MappedFile
from rmq.store.results import DispatchRequest
from rmq.store.service_thread import ServiceThread

log = logging.getLogger(__name__)

IDLE_WAIT_S = 1.0
DISPATCH_CHUNK = 128   # records parsed before their ConsumeQueue entries are written together


class ReputMessageService(ServiceThread):
    name = "reput"

    def __init__(self, commit_log: CommitLog, dispatch: Callable[[DispatchBatch], None],
                 dispatch_one: Callable[[DispatchRequest], None],
                 wait_for_record_tails: bool = False) -> None:
        super().__init__()
        self.commit_log = commit_log
        # where dispatch ends: the CommitLog's end, or the confirm offset (MessageStore.bound_reads)
        self.end: Callable[[], int] = commit_log.mapped_file_queue.get_max_offset   # get_max_offset's
        self.dispatch = dispatch
        self.dispatch_one = dispatch_one
        # A slave's CommitLog may end inside a record whose rest the master has not sent yet
        # (its chunks are not record-aligned): dispatch waits for the rest instead of failing.
        self.wait_for_record_tails = wait_for_record_tails
        self.reput_from_offset = 0
        self._dispatching = threading.Lock()

    def run_once(self) -> None:
        self.wait_for_running(IDLE_WAIT_S)
        self.do_reput()

    def behind(self) -> int:
        """CommitLog bytes not dispatched yet (unconfirmed ones included)."""
        return self.commit_log.get_max_offset() - self.reput_from_offset

    def try_dispatch_appended(self, start_offset: int, end_offset: int,
                              appended: Callable[[], DispatchBatch]) -> bool:
        """Dispatch on the calling thread, a putter that just appended [start_offset, end_offset),
        unless another dispatch is running (False then). When dispatch stands exactly at
        start_offset, the putter's records are dispatched from the columns it already knows
        instead of being parsed back from the CommitLog."""
        if not self._dispatching.acquire(blocking=False):
            return False
        try:
            end = self.end()
            if self.reput_from_offset == start_offset and end_offset <= end:
                self.dispatch(appended())
                self.reput_from_offset = end_offset
            if self.reput_from_offset < end:
                self._do_reput()
        finally:
            self._dispatching.release()
        return True

    def try_dispatch_record(self, start_offset: int, end_offset: int, request: DispatchRequest) -> bool:
        """try_dispatch_appended for one record a putter just appended at start_offset, known
        as its DispatchRequest (the single-message path: no DispatchBatch is built)."""
        if not self._dispatching.acquire(blocking=False):
            return False
        try:
            end = self.end()
            if self.reput_from_offset == start_offset and end_offset <= end:
                self.dispatch_one(request)
                self.reput_from_offset = end_offset
            if self.reput_from_offset < end:
                self._do_reput()
        finally:
            self._dispatching.release()
        return True

    def do_reput(self) -> None:
        """Dispatch every complete record from reput_from_offset up to end()."""
        with self._dispatching:
            self._do_reput()

    def _do_reput(self) -> None:
        queue = self.commit_log.mapped_file_queue
        while self.reput_from_offset < self.end():
            if self.reput_from_offset < self.commit_log.get_min_offset():
                self.reput_from_offset = self.commit_log.get_min_offset()   # files deleted meanwhile
            mapped = queue.find_mapped_file_by_offset(self.reput_from_offset)
            if mapped is None or not mapped.hold():
                return
            try:
                if not self._dispatch_file(mapped):
                    return
            finally:
                mapped.release()

    def _dispatch_file(self, mapped: MappedFile) -> bool:
        """Dispatch the readable records of one file in chunks; False on an invalid record."""
        base = mapped.file_from_offset
        position = self.reput_from_offset - base
        limit = mapped.read_position()
        wait_for_tails = self.wait_for_record_tails
        confirmed = self.end() - base
        if confirmed < limit:   # bounded by the confirm offset, maybe inside a record
            limit, wait_for_tails = confirmed, True
        buffer, file_size = mapped.mm, mapped.file_size
        while position < limit:
            chunk: list[DispatchRequest] = []
            size = 1
            while position < limit and len(chunk) < DISPATCH_CHUNK:
                if wait_for_tails and _incomplete(buffer, position, limit):
                    size = -2
                    break
                size, request = parse_record(buffer, position, file_size, base, False)
                if size <= 0 or request is None:
                    break
                chunk.append(request)
                position += size
            if chunk:
                self.dispatch(DispatchBatch.from_requests(chunk))
                self.reput_from_offset = base + position
            if size == 0:
                self.reput_from_offset = self.commit_log.roll_next_file(self.reput_from_offset)
                return True
            if size == -2:   # the rest of the record is still on its way (or not confirmed yet)
                return False
            if size < 0:
                log.error("reput: invalid record at CommitLog offset %d, dispatch paused", base + position)
                return False
        return True


_HEAD = struct.Struct(">ii")


def _incomplete(buffer: mmap.mmap, position: int, limit: int) -> bool:
    """Fewer bytes than a record's (or an end-of-file blank's) head, or a record running past `limit`."""
    if limit - position < _HEAD.size:
        return True
    head: tuple[int, int] = _HEAD.unpack_from(buffer, position)
    total_size, magic = head
    return magic == mf.MESSAGE_MAGIC_CODE and position + total_size > limit
