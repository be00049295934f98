"""Flush services (spec store §10): GroupCommitService for SYNC flush, FlushRealTimeService for
ASYNC flush, FlushConsumeQueueService for consume queues, index and checkpoint."""

from __future__ import annotations

import threading
from collections.abc import Callable

from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.mapped_file import now_ms
from rmq.store.mapped_file_queue import MappedFileQueue
from rmq.store.service_thread import ServiceThread

GROUP_COMMIT_WAIT_S = 0.010   # GroupCommitService#run waits 10 ms per loop
GROUP_COMMIT_FLUSH_ATTEMPTS = 2


def thorough_least_pages(now: int, last_thorough: int, thorough_interval_ms: int, least_pages: int
                         ) -> tuple[int, int]:
    """(least pages to use, new last-thorough timestamp): every thorough interval the flush
    takes any dirty data (leastPages 0) (spec store §10.2, TV14)."""
    if now >= last_thorough + thorough_interval_ms:
        return 0, now
    return least_pages, last_thorough


class GroupCommitService(ServiceThread):
    """SYNC flush: putters wait until flushedWhere covers their records; one flush serves
    every waiter that arrived meanwhile (group commit)."""

    name = "group-commit"

    def __init__(self, queue: MappedFileQueue, checkpoint: StoreCheckpoint) -> None:
        super().__init__()
        self.queue = queue
        self.checkpoint = checkpoint
        self._flushed = threading.Condition()
        self._requested = 0

    def wait_for_flush(self, next_offset: int, timeout_ms: int) -> bool:
        """GroupCommitRequest(nextOffset).waitForFlush: False after the timeout (TV13)."""
        with self._flushed:
            if self.queue.flushed_where >= next_offset:
                return True
            self._requested = max(self._requested, next_offset)
            self.wakeup()
            return self._flushed.wait_for(lambda: self.queue.flushed_where >= next_offset,
                                          max(timeout_ms, 0) / 1000)

    def run_once(self) -> None:
        self.wait_for_running(GROUP_COMMIT_WAIT_S)
        self.do_commit()

    def do_commit(self) -> None:
        target = self._requested
        for _ in range(GROUP_COMMIT_FLUSH_ATTEMPTS):
            self.queue.flush(0)
            if self.queue.flushed_where >= target:
                break
        if self.queue.store_timestamp:
            self.checkpoint.physic_msg_timestamp = self.queue.store_timestamp
        with self._flushed:
            self._flushed.notify_all()


class _IntervalFlushService(ServiceThread):
    """Every interval: flush at least `least_pages` dirty pages, and everything once per
    thorough interval (spec store §10.2, TV14)."""

    def __init__(self, interval_ms: int, least_pages: int, thorough_interval_ms: int) -> None:
        super().__init__()
        self.interval_ms = interval_ms
        self.least_pages = least_pages
        self.thorough_interval_ms = thorough_interval_ms
        self._last_thorough = 0

    def run_once(self) -> None:
        self.wait_for_running(self.interval_ms / 1000)
        least, self._last_thorough = thorough_least_pages(now_ms(), self._last_thorough,
                                                          self.thorough_interval_ms, self.least_pages)
        self.flush(least)

    def flush(self, least_pages: int) -> None:
        raise NotImplementedError


class FlushRealTimeService(_IntervalFlushService):
    """ASYNC flush: every flush_interval_ms flush the CommitLog and record its time in the checkpoint."""

    name = "flush-commit-log"

    def __init__(self, queue: MappedFileQueue, checkpoint: StoreCheckpoint, interval_ms: int,
                 least_pages: int, thorough_interval_ms: int) -> None:
        super().__init__(interval_ms, least_pages, thorough_interval_ms)
        self.queue = queue
        self.checkpoint = checkpoint

    def flush(self, least_pages: int) -> None:
        self.queue.flush(least_pages)
        if self.queue.store_timestamp:
            self.checkpoint.physic_msg_timestamp = self.queue.store_timestamp


class FlushConsumeQueueService(_IntervalFlushService):
    """Every interval: flush consume queues and index, then persist the checkpoint."""

    name = "flush-consume-queue"

    def __init__(self, flush_logics: Callable[[int], None], interval_ms: int, least_pages: int,
                 thorough_interval_ms: int) -> None:
        super().__init__(interval_ms, least_pages, thorough_interval_ms)
        self.flush_logics = flush_logics

    def flush(self, least_pages: int) -> None:
        self.flush_logics(least_pages)
