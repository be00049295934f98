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


def svg_chart(series: dict[str, list[tuple[float, float]]], width: int = 640, height: int = 160) -> str:
    """An inline SVG line chart (no script, no external asset) of every series over the window."""
    points = [p for values in series.values() for p in values]
    if not points:
        return (f'<svg class="chart" width="{width}" height="{height}">'
                '<text x="10" y="20">no data yet</text></svg>')
    t0, t1 = min(t for t, _ in points), max(t for t, _ in points)
    top = max(v for _, v in points) or 1.0
    lines = []
    for index, (name, values) in enumerate(sorted(series.items())):
        coords = " ".join(f"{(t - t0) / max(t1 - t0, 1) * (width - 20) + 10:.1f},"
                          f"{height - 20 - v / top * (height - 40):.1f}" for t, v in values)
        lines.append(f'<polyline class="s{index % 8}" fill="none" points="{coords}"><title>{_escape(name)}'
                     f'</title></polyline>')
    return (f'<svg class="chart" width="{width}" height="{height}" role="img">'
            f'<text x="10" y="14">max {top:,.1f}</text>{"".join(lines)}</svg>')


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
