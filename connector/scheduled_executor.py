"""A one-thread ScheduledExecutorService: run small tasks after a delay or at a fixed rate
(pull later, consume later, persist offsets, heartbeats). Tasks must be short; a failing
task is logged and does not stop the others."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)


class ScheduledTask:
    """A periodic task's handle: `cancel()` stops it (a run in progress finishes)."""

    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ScheduledExecutor:
    def __init__(self, name: str) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._sequence = itertools.count()
        self._condition = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def schedule(self, delay_s: float, task: Callable[[], None]) -> None:
        """Run `task` once, `delay_s` seconds from now (ignored after shutdown)."""
        with self._condition:
            if self._stopped:
                return
            heapq.heappush(self._heap, (time.monotonic() + delay_s, next(self._sequence), task))
            self._condition.notify()

    def schedule_at_fixed_rate(self, initial_delay_s: float, period_s: float,
                               task: Callable[[], None]) -> ScheduledTask:
        """Run `task` after `initial_delay_s` and then every `period_s`, until cancelled."""
        handle = ScheduledTask()

        def repeat() -> None:
            if handle.cancelled:
                return
            try:
                task()
            finally:
                self.schedule(period_s, repeat)

        self.schedule(initial_delay_s, repeat)
        return handle

    def shutdown(self) -> None:
        """Drop the pending tasks and stop the thread (a running task finishes first)."""
        with self._condition:
            self._stopped = True
            self._heap.clear()
            self._condition.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            with self._condition:
                while not self._stopped and (not self._heap or self._heap[0][0] > time.monotonic()):
                    timeout = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._condition.wait(timeout)
                if self._stopped:
                    return
                _, _, task = heapq.heappop(self._heap)
            try:
                task()
            except Exception:
                logger.exception("scheduled task %s failed", getattr(task, "__qualname__", task))
