"""A broker's resource figures over a scenario, read from its Prometheus endpoint
(`--metrics-listen`) every few seconds on a thread: RSS, open fds, threads, mmaps, held pulls
and the sizes of the tables clients fill. `summary` gives each figure's start, max, end and
least-squares slope after a warm-up, which the scenarios bound and report."""

from __future__ import annotations

import threading
import time
import urllib.request
from dataclasses import dataclass, field

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

MiB = 1024 * 1024

# figure name -> (metric, scale): what a sample keeps
FIGURES = {
    "rss_mib": ("process_resident_memory_bytes", 1 / MiB),
    "open_fds": ("process_open_fds", 1),
    "threads": ("rmq_process_threads", 1),
    "mmaps": ("rmq_process_mmaps", 1),
    "held_pulls": ("rmq_held_pulls", 1),
    "inflight_pull_mib": ("rmq_inflight_pull_bytes", 1 / MiB),
    "consumer_groups": ("rmq_consumer_groups", 1),
    "consumer_clients": ("rmq_consumer_clients", 1),
    "queue_locks": ("rmq_queue_locks", 1),
    "offset_entries": ("rmq_consumer_offset_entries", 1),
    "topics": ("rmq_topics", 1),
    "dispatch_behind_bytes": ("rmq_dispatch_behind_bytes", 1),
}


def scrape(address: str) -> dict[str, float]:
    """The broker's unlabelled-by-topic figures (one value per metric name)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values.setdefault(sample.name, sample.value)
    return {name: values[metric] * scale for name, (metric, scale) in FIGURES.items() if metric in values}


@dataclass(frozen=True)
class FigureSummary:
    figure: str
    start: float
    max: float
    end: float
    slope_per_min: float      # least squares over the samples after the warm-up

    def cells(self) -> list[str]:
        return [self.figure, f"{self.start:.0f}", f"{self.max:.0f}", f"{self.end:.0f}",
                f"{self.slope_per_min:+.2f}"]


@dataclass
class ResourceSampler:
    """Samples `metrics_address` every `interval` seconds while running (a context manager)."""

    metrics_address: str
    interval: float = 2.0
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    errors: int = 0

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = time.monotonic()

    def __enter__(self) -> ResourceSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def sample_now(self) -> dict[str, float]:
        figures = scrape(self.metrics_address)
        self.samples.append((time.monotonic() - self._started, figures))
        return figures

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sample_now()
            except OSError:            # the broker is restarting: a gap in the series
                self.errors += 1
            self._stop.wait(self.interval)

    def summary(self, warm_up_s: float) -> list[FigureSummary]:
        """Per figure: the first sample after `warm_up_s` (start), the max and the last sample after
        it, and the slope per minute of a least-squares line through those samples."""
        after = [(t, s) for t, s in self.samples if t >= warm_up_s]
        assert len(after) >= 3, f"only {len(after)} samples after the {warm_up_s:.0f} s warm-up"
        out = []
        for name in FIGURES:
            points = [(t, s[name]) for t, s in after if name in s]
            if len(points) < 3:
                continue
            times, values = np.array(points).T
            slope = float(np.polyfit(times, values, 1)[0]) * 60
            out.append(FigureSummary(name, values[0], values.max(), values[-1], slope))
        return out

    def overall_max(self, figure: str) -> float:
        return max(s[figure] for _, s in self.samples if figure in s)


def by_figure(summaries: list[FigureSummary]) -> dict[str, FigureSummary]:
    return {summary.figure: summary for summary in summaries}
