"""The console's charts: TPS per topic, lag and consume TPS per group over the last hour, sampled
by a background thread with the console's own identity. Bounded: MAX_SERIES series of at most
WINDOW_S / interval points each; a topic or group beyond MAX_SERIES is not charted."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

WINDOW_S = 3600
MAX_SERIES = 20


@dataclass(frozen=True)
class Sample:
    """One look at the cluster: messages ever stored per topic, total lag per group, and messages
    the brokers ever handed each group's pulls (their counters since they started)."""

    stored: dict[str, int]
    lag: dict[str, int]
    consumed: dict[str, int] = field(default_factory=dict)


@dataclass
class Series:
    points: deque[tuple[float, float]] = field(default_factory=deque)   # (time s, value)

    def add(self, at: float, value: float, window_s: float) -> None:
        self.points.append((at, value))
        while self.points and self.points[0][0] < at - window_s:
            self.points.popleft()


class History:
    """`sample()` returns a Sample; a topic's TPS (and a group's consume TPS) is the change of its
    count between two samples. Call `tick()` to sample once (tests), `start()` to sample every
    `interval_s` on a daemon thread."""

    def __init__(self, sample: Callable[[], Sample], interval_s: float = 10.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._sample = sample
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: tuple[float, Sample] | None = None
        self.tps: dict[str, Series] = {}
        self.lag: dict[str, Series] = {}
        self.consume: dict[str, Series] = {}
        self.error = ""
        self._stop = threading.Event()

    def tick(self) -> None:
        try:
            sample = self._sample()
        except Exception as error:   # the cluster is down or refuses the console's identity
            self.error = f"charts not updated: {error}"
            return
        self.error = ""
        now = self._clock()
        with self._lock:
            if self._last is not None and now > self._last[0]:
                at, before = self._last
                _add_rates(self.tps, before.stored, sample.stored, now, now - at)
                _add_rates(self.consume, before.consumed, sample.consumed, now, now - at)
            for group, behind in sample.lag.items():
                _series(self.lag, group).add(now, behind, WINDOW_S)
            self._last = (now, sample)

    def snapshot(self) -> dict[str, dict[str, list[tuple[float, float]]]]:
        with self._lock:
            return {kind: {name: list(s.points) for name, s in table.items()}
                    for kind, table in (("tps", self.tps), ("lag", self.lag), ("consume", self.consume))}

    def start(self) -> None:
        threading.Thread(target=self._run, name="console-history", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self.interval_s)


def _add_rates(table: dict[str, Series], before: dict[str, int], after: dict[str, int], now: float,
               elapsed: float) -> None:
    """Each name's count per second between two samples (a counter that went back, a broker
    restarted, counts as 0)."""
    for name, count in after.items():
        if name in before:
            _series(table, name).add(now, max(count - before[name], 0) / elapsed, WINDOW_S)


def _series(table: dict[str, Series], name: str) -> Series:
    if name not in table and len(table) >= MAX_SERIES:
        return Series()      # not charted: the table stays bounded
    return table.setdefault(name, Series())
