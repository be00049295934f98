"""Broker isolation for sends (RocketMQ MQFaultStrategy / LatencyFaultToleranceImpl, reduced to
its isolation rule): a broker that could not be reached is not chosen for sends for
`isolation_s` (unless every broker of the topic is isolated), then tried again, so a killed
broker costs one failed attempt per isolation period instead of one per send, and a broker that
returns is picked up after the period."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

BROKER_ISOLATION_S = 30.0    # RocketMQ isolates a broker whose send threw for 30 s (sendLatencyFaultEnable)


class LatencyFaultTolerance:
    def __init__(self, isolation_s: float = BROKER_ISOLATION_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.isolation_s = isolation_s
        self._clock = clock
        self._until: dict[str, float] = {}
        self._lock = threading.Lock()

    def isolate(self, broker: str) -> None:
        """`broker` failed a send: avoid it for the isolation period."""
        with self._lock:
            self._until[broker] = self._clock() + self.isolation_s

    def is_available(self, broker: str) -> bool:
        with self._lock:
            until = self._until.get(broker)
            if until is not None and self._clock() >= until:
                del self._until[broker]
                return True
            return until is None

    def choose_from(self, brokers: Sequence[str]) -> list[str]:
        """The available brokers among `brokers`, or all of them when none is."""
        if not self._until:   # none isolated (the common case), without the lock
            return list(brokers)
        return [b for b in brokers if self.is_available(b)] or list(brokers)
