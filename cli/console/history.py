"""The console's charts: TPS per topic and lag per group over the last hour, sampled by a
background thread with the console's own identity. Bounded: MAX_SERIES series of at most
WINDOW_S / interval points each; a topic or group beyond MAX_SERIES is not charted."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

WINDOW_S = 3600
MAX_SERIES = 20


@dataclass
class Series:
    points: deque[tuple[float, float]] = field(default_factory=deque)   # (time s, value)

    def add(self, at: float, value: float, window_s: float) -> None:
        self.points.append((at, value))
        while self.points and self.points[0][0] < at - window_s:
            self.points.popleft()


class History:
    """`sample()` returns (messages stored per topic, total lag per group); TPS is the change of
    the first between two samples. Call `tick()` to sample once (tests), `start()` to sample every
    `interval_s` on a daemon thread."""

    def __init__(self, sample: Callable[[], tuple[dict[str, int], dict[str, int]]], interval_s: float = 10.0,
                 clock: Callable[[], float] = time.time) -> None:
        self._sample = sample
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: tuple[float, dict[str, int]] | None = None
        self.tps: dict[str, Series] = {}
        self.lag: dict[str, Series] = {}
        self.error = ""
        self._stop = threading.Event()

    def tick(self) -> None:
        try:
            stored, lag = self._sample()
        except Exception as error:   # the cluster is down or refuses the console's identity
            self.error = f"charts not updated: {error}"
            return
        self.error = ""
        now = self._clock()
        with self._lock:
            if self._last is not None and now > self._last[0]:
                elapsed = now - self._last[0]
                for topic, count in stored.items():
                    before = self._last[1].get(topic)
                    if before is not None:
                        _series(self.tps, topic).add(now, max(count - before, 0) / elapsed, WINDOW_S)
            for group, behind in lag.items():
                _series(self.lag, group).add(now, behind, WINDOW_S)
            self._last = (now, stored)

    def snapshot(self) -> dict[str, dict[str, list[tuple[float, float]]]]:
        with self._lock:
            return {"tps": {name: list(s.points) for name, s in self.tps.items()},
                    "lag": {name: list(s.points) for name, s in self.lag.items()}}

    def start(self) -> None:
        threading.Thread(target=self._run, name="console-history", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.tick()
            self._stop.wait(self.interval_s)


def _series(table: dict[str, Series], name: str) -> Series:
    if name not in table and len(table) >= MAX_SERIES:
        return Series()      # not charted: the table stays bounded
    return table.setdefault(name, Series())
