"""The consume services' consumeExecutor: a fixed set of daemon threads taking requests from one
queue (a plain queue and threads: a Future per message costs more than the listener call itself
at batches of 1). After shutdown, queued and newly submitted requests are dropped: their offsets
were not committed, so the queue's next owner consumes them."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
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
        self._requests: queue.SimpleQueue[R | None] = queue.SimpleQueue()
        self.stopped = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}-{i}", daemon=True)
                         for i in range(threads)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def submit(self, request: R) -> None:
        if not self.stopped:
            self._requests.put(request)

    def shutdown(self, await_termination_s: float) -> None:
        """Stop taking requests; wait up to `await_termination_s` for running ones."""
        self.stopped = True
        for _ in self._threads:
            self._requests.put(None)
        deadline = time.monotonic() + await_termination_s
        for thread in self._threads:
            if thread.is_alive():
                thread.join(max(0.0, deadline - time.monotonic()))

    def _work(self) -> None:
        while (request := self._requests.get()) is not None:
            if self.stopped:
                continue
            try:
                self._run(request)
            except Exception:
                logger.exception("consume request of %s failed", request.message_queue)
