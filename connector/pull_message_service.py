"""PullMessageService (docs/internals/pull.md §6): the one pull thread of a
ClientInstance, shared by every consumer of the instance (PushConsumer and PullConsumer alike).
It takes pull requests (consumer, message queue, process queue, next offset) off a blocking
queue and hands each to its consumer's `pull_message`, which sends the pull asynchronously and
re-queues the request from the pull's callback. Delayed re-queues (flow control 50 ms,
exceptions 3 s) go through the service's ScheduledExecutor. A consumer registers before its
first request and unregisters when it shuts down: its requests queued or scheduled then are
dropped, and a `pull_message` of it running then finishes first."""

from __future__ import annotations

import logging
import queue
import threading
from typing import TYPE_CHECKING, Protocol

from rmq.connector.scheduled_executor import ScheduledExecutor

if TYPE_CHECKING:   # RebalanceImpl imports the SDK's consumer side, which Spark's query runner does not use
    from rmq.connector.rebalance_impl import PullRequest

logger = logging.getLogger(__name__)


class PullingConsumer(Protocol):
    """What the pull thread asks of a consumer (DefaultMQPushConsumerImpl#pullMessage)."""

    def pull_message(self, request: PullRequest) -> None: ...


_Entry = tuple[PullingConsumer, "PullRequest"]
_STOP = None


class PullMessageService:
    def __init__(self, name: str = "rmq-pull", scheduler: ScheduledExecutor | None = None) -> None:
        self._name = name
        self._scheduler = scheduler
        self._requests: queue.SimpleQueue[_Entry | None] = queue.SimpleQueue()
        self._consumers: set[PullingConsumer] = set()
        self._dispatch_lock = threading.RLock()   # held while a consumer's pull_message runs
        self._stopped = False
        self._thread: threading.Thread | None = None

    def register(self, consumer: PullingConsumer) -> None:
        """Serve `consumer`'s pull requests (the thread starts with the first consumer)."""
        with self._dispatch_lock:
            if self._stopped:
                return
            self._consumers.add(consumer)
            if self._scheduler is None:
                self._scheduler = ScheduledExecutor(f"{self._name}-scheduled")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()

    def unregister(self, consumer: PullingConsumer) -> None:
        """No more pulls for `consumer`: returns once none of its pull_message calls runs."""
        with self._dispatch_lock:
            self._consumers.discard(consumer)

    def serves(self, consumer: PullingConsumer) -> bool:
        return consumer in self._consumers

    def execute_pull_request_immediately(self, consumer: PullingConsumer, request: PullRequest) -> None:
        if not self._stopped and consumer in self._consumers:
            self._requests.put((consumer, request))

    def execute_pull_request_later(self, consumer: PullingConsumer, request: PullRequest,
                                   delay_ms: int) -> None:
        if self._scheduler is not None:
            self._scheduler.schedule(delay_ms / 1000,
                                     lambda: self.execute_pull_request_immediately(consumer, request))

    def shutdown(self) -> None:
        with self._dispatch_lock:
            self._stopped = True
            self._consumers.clear()
        self._requests.put(_STOP)
        if self._thread is not None and self._thread.is_alive() \
                and self._thread is not threading.current_thread():
            self._thread.join(timeout=10)
        if self._scheduler is not None:
            self._scheduler.shutdown()

    def _run(self) -> None:
        while True:
            entry = self._requests.get()
            if entry is _STOP or self._stopped:
                return
            consumer, request = entry
            with self._dispatch_lock:
                if consumer not in self._consumers:
                    continue   # shut down since the request was queued
                try:
                    consumer.pull_message(request)
                except Exception:
                    logger.exception("Pull Message Service Run Method exception")
