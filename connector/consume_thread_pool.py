"""The consume services' consumeExecutor: a fixed set of daemon threads taking requests from one
queue (a deque and threads: a Future per message costs more than the listener call itself at
batches of 1). After shutdown, queued and newly submitted requests are dropped: their offsets
were not committed, so the queue's next owner consumes them.

Waking a thread per request made a pull of 32 cost 32 thread wake-ups and GIL hand-offs. Here at
most one woken thread is on its way at any time: `submit_all` wakes one idle thread, and a thread
that takes a request while more are queued wakes one more before running it, unless one is
already waking. A listener that blocks (I/O, sleep) lets the woken thread take the next request,
which wakes the next: slow listeners still run on every thread, as with one wake per request;
fast ones are drained by the threads already running.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Generic, Protocol, TypeVar

from rmq.connector.client import MessageQueue

logger = logging.getLogger(__name__)


class _Request(Protocol):
    @property
    def message_queue(self) -> MessageQueue: ...


R = TypeVar("R", bound=_Request)


class ConsumeThreadPool(Generic[R]):
    def __init__(self, name: str, threads: int, run: Callable[[R], None]) -> None:
        self._run = run
        self._requests: deque[R] = deque()
        self._ready = threading.Condition(threading.Lock())
        self._waiting = 0   # threads inside wait()
        self._waking = 0    # of those, notified and not yet returned from wait()
        self.stopped = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(threads)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, request: R) -> None:
        self.submit_all((request,))

    def submit_all(self, requests: Iterable[R]) -> None:
        """Queue `requests` in order; one idle thread is woken (see the module docstring)."""
        with self._ready:
            if self.stopped:
                return
            self._requests.extend(requests)
            self._wake_one()

    def shutdown(self, await_termination_s: float) -> None:
        """Stop taking requests; wait up to `await_termination_s` for running ones."""
        with self._ready:
            self.stopped = True
            self._requests.clear()
            self._ready.notify_all()
        deadline = time.monotonic() + await_termination_s
        for thread in self._threads:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))

    def _wake_one(self) -> None:
        """With the lock held: wake an idle thread unless one is already on its way."""
        if self._waking == 0 and self._waiting > 0:
            self._waking += 1
            self._ready.notify()

    def _take(self) -> R | None:
        """The next request (None once stopped); wakes another thread when more are queued."""
        with self._ready:
            while not self._requests and not self.stopped:
                self._waiting += 1
                self._ready.wait()
                self._waiting -= 1
                self._waking = max(0, self._waking - 1)   # every notify() wakes exactly one waiter
            if self.stopped:
                return None
            request = self._requests.popleft()
            if self._requests:
                self._wake_one()
            return request

    def _work(self) -> None:
        while (request := self._take()) is not None:
            try:
                self._run(request)
            except Exception:
                logger.exception("consume request of %s failed", request.message_queue)
