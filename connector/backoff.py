"""Retrying transient broker failures (RmqUnavailable) with exponential backoff within a
time window, on executors (pulls) and on the driver (planning micro-batches), like
RocketMQ's pull-later-on-exception (spec consumer-startup §4.4.2)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from rmq.connector.client import RmqUnavailable

FIRST_BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0

T = TypeVar("T")


class Backoff:
    """Exponential backoff within a window that starts at the first failure."""

    def __init__(self, window_s: float) -> None:
        self._deadline = time.monotonic() + window_s
        self._delay = FIRST_BACKOFF_S

    def wait(self) -> bool:
        """Sleep before the next attempt; False when the window is used up."""
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(self._delay, remaining))
        self._delay = min(self._delay * 2, MAX_BACKOFF_S)
        return True


def retry_unavailable(call: Callable[[], T], window_ms: int, action: str) -> T:
    """`call()`, again and again while brokers are unreachable, for up to `window_ms`."""
    backoff = Backoff(window_ms / 1000)
    while True:
        try:
            return call()
        except RmqUnavailable as error:
            if not backoff.wait():
                raise RmqUnavailable(
                    f"{action}: still unreachable after retrying for {window_ms} ms (pullTimeoutMs): "
                    f"{error.message}", broker=error.broker, queue=error.queue,
                ) from error
