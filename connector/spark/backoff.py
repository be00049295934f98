"""Retrying transient broker failures (RmqUnavailable) with exponential backoff within a
time window (the source's brokerOutageWindowMs), on executors (pulls) and on the driver
(planning micro-batches), like RocketMQ's pull-later-on-exception (spec consumer-startup
§4.4). Each retry round logs one line naming the broker, so an outage is visible while
it is being ridden out."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from rmq.connector.client import RmqUnavailable

logger = logging.getLogger(__name__)

FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 2.0

T = TypeVar("T")


class Backoff:
    """Exponential backoff within a window that starts at the first failure."""

    def __init__(self, window_s: float) -> None:
        self._deadline = time.monotonic() + window_s
        self._delay = FIRST_BACKOFF_S
        self.rounds = 0

    def remaining(self) -> float:
        return max(self._deadline - time.monotonic(), 0.0)

    def next_delay(self) -> float:
        return min(self._delay, self.remaining())

    def wait(self) -> bool:
        """Sleep before the next attempt; False when the window is used up."""
        delay = self.next_delay()
        if delay <= 0:
            return False
        time.sleep(delay)
        self._delay = min(self._delay * 2, MAX_BACKOFF_S)
        self.rounds += 1
        return True


def log_retry(backoff: Backoff, action: str, problem: str, broker: str | None, option: str) -> None:
    """The log line of one retry round: what, which broker, and how long is left."""
    logger.warning(
        "%s: broker %s: %s; retry %d in %.2f s (%.0f s left of %s)",
        action, broker or "?", problem, backoff.rounds + 1, backoff.next_delay(), backoff.remaining(), option,
    )


def retry_unavailable(call: Callable[[], T], window_ms: int, action: str, option: str) -> T:
    """`call()`, again and again while brokers are unreachable, for up to `window_ms`
    (named `option` in messages). Refusals (any other RmqError) are raised at once."""
    backoff = Backoff(window_ms / 1000)
    while True:
        try:
            return call()
        except RmqUnavailable as error:
            if backoff.remaining() > 0:
                log_retry(backoff, action, error.message, error.broker, option)
            if not backoff.wait():
                raise RmqUnavailable(
                    f"{action}: still unreachable after retrying for {window_ms} ms ({option}): "
                    f"{error.message}", broker=error.broker, queue=error.queue,
                ) from error
