"""PullMessageService (spec consumer-pull-rebalance §6): one thread taking PullRequests off
a blocking queue and handing each to the consumer's pullMessage, which sends the pull
asynchronously and re-queues the request from the pull's callback. Delayed re-queues (flow
control 50 ms, exceptions 3 s) go through a ScheduledExecutor."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

from rmq.connector.rebalance_impl import PullRequest
from rmq.connector.scheduled_executor import ScheduledExecutor

logger = logging.getLogger(__name__)

_STOP = None


class PullMessageService:
    def __init__(self, pull_message: Callable[[PullRequest], None], scheduler: ScheduledExecutor) -> None:
        self._pull_message = pull_message
        self._scheduler = scheduler
        self._requests: queue.SimpleQueue[PullRequest | None] = queue.SimpleQueue()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="rmq-pull", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def execute_pull_request_immediately(self, request: PullRequest) -> None:
        if not self._stopped:
            self._requests.put(request)

    def execute_pull_request_later(self, request: PullRequest, delay_ms: int) -> None:
        self._scheduler.schedule(delay_ms / 1000, lambda: self.execute_pull_request_immediately(request))

    def shutdown(self) -> None:
        self._stopped = True
        self._requests.put(_STOP)
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            request = self._requests.get()
            if request is _STOP or self._stopped:
                return
            try:
                self._pull_message(request)
            except Exception:
                logger.exception("Pull Message Service Run Method exception")
