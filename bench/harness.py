"""Statistics and table rows for the benchmark: repeated runs -> median and min-max spread,
a ratio against a reference measured in the same run, and Markdown formatting."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Stats:
    """One figure over repeated runs: the median and the min-max spread."""

    median: float
    low: float
    high: float
    runs: int

    @classmethod
    def of(cls, samples: Sequence[float]) -> Stats:
        if not samples:
            raise ValueError("Stats.of needs at least one sample")
        return cls(statistics.median(samples), min(samples), max(samples), len(samples))


def percentile(samples: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile (fraction in 0..1) of one run's samples."""
    if not samples:
        raise ValueError("percentile of no samples")
    ordered = sorted(samples)
    rank = max(1, -(-len(ordered) * fraction // 1))  # ceil(n * fraction), at least 1
    return ordered[int(rank) - 1]


def rate(count: int, run: Callable[[], object]) -> float:
    """Items per second for one call of `run` that handles `count` items."""
    start = time.perf_counter()
    run()
    return count / (time.perf_counter() - start)


HOLD_SETTLE_S = 0.005  # lets a blocking read reach the server before it is woken


def wake_latency_ms(
    block: Callable[[], object], wake: Callable[[], object], settle_s: float = HOLD_SETTLE_S
) -> float:
    """Run `block` (a blocking read) in a thread, call `wake` (one write) once it is parked;
    returns ms from just before `wake` to the moment `block` returned."""
    sent_at: list[float] = []
    returned_at: list[float] = []

    def reader() -> None:
        block()
        returned_at.append(time.perf_counter())

    thread = threading.Thread(target=reader)
    thread.start()
    time.sleep(settle_s)
    sent_at.append(time.perf_counter())
    wake()
    thread.join()
    if not returned_at:
        raise RuntimeError("the blocking read did not return")
    return (returned_at[0] - sent_at[0]) * 1000.0


def call_latencies_ms(call: Callable[[], object], samples: int, warmup: int = 20, idle_s: float = 0.0
                      ) -> list[float]:
    """`samples` timings in ms of `call`, after `warmup` untimed calls; each timed call after
    `idle_s` of sleep (as a wake comes after its reader parked) or back to back."""
    for _ in range(warmup):
        call()
    latencies = []
    for _ in range(samples):
        if idle_s:
            time.sleep(idle_s)
        start = time.perf_counter()
        call()
        latencies.append((time.perf_counter() - start) * 1000.0)
    return latencies


def measure(run: Callable[[], float], repeats: int) -> Stats:
    """Call `run` (which returns one figure) `repeats` times."""
    return Stats.of([run() for _ in range(repeats)])


def measure_pair(
    subject: Callable[[], float], reference: Callable[[], float] | None, repeats: int
) -> tuple[Stats, Stats | None]:
    """Alternate subject and reference runs, so load from other processes on this shared
    machine hits both alike; returns (subject stats, reference stats or None without one)."""
    subject_stats, reference_stats = measure_alternating([subject, reference], repeats)
    assert subject_stats is not None
    return subject_stats, reference_stats


def measure_alternating(runs: Sequence[Callable[[], float] | None], repeats: int) -> list[Stats | None]:
    """Each run once per repeat, in turn (None: not run, None stats), so load from other processes
    hits all alike; several subjects can share one reference's runs this way."""
    samples: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for run, into in zip(runs, samples, strict=True):
            if run is not None:
                into.append(run())
    return [Stats.of(values) if values else None for values in samples]


@dataclass(frozen=True)
class Target:
    """What a row must reach: a minimum or maximum ratio to its reference, or a maximum value."""

    min_ratio: float | None = None
    max_ratio: float | None = None
    max_value: float | None = None
    unit: str = ""
    min_value: float | None = None

    def describe(self) -> str:
        if self.min_ratio is not None:
            return f"≥ {self.min_ratio:g}× reference"
        if self.max_ratio is not None:
            return f"≤ {self.max_ratio:g}× reference"
        if self.min_value is not None:
            return f"≥ {self.min_value:,g} {self.unit}"
        return f"< {self.max_value:g} {self.unit}"

    def met(self, row: Row) -> bool | None:
        if self.max_value is not None:
            return None if row.value is None else row.value.median < self.max_value
        if self.min_value is not None:
            return None if row.value is None else row.value.median >= self.min_value
        ratio = row.ratio
        if ratio is None:
            return None
        return ratio >= self.min_ratio if self.min_ratio is not None else ratio <= self.max_ratio


@dataclass
class Row:
    """One line of a results table. `value` is None when the row was not measured, and then
    `note` says why. The ratio is rmq ÷ reference (for latencies lower is better)."""

    name: str
    unit: str
    value: Stats | None
    reference_name: str = ""
    reference: Stats | None = None
    target: Target | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.value is None or self.reference is None or self.reference.median == 0:
            return None
        return self.value.median / self.reference.median

    @property
    def verdict(self) -> str:
        if self.target is None:
            return "—"
        met = self.target.met(self)
        return {True: "met", False: "**missed**", None: "—"}[met]


def not_measured(name: str, reason: str, target: Target | None = None) -> Row:
    return Row(name=name, unit="", value=None, target=target, note=f"not measured: {reason}")


def format_number(value: float) -> str:
    """Three significant figures, K/M suffixes for large values."""
    magnitude = abs(value)
    for threshold, divisor, suffix in ((1e9, 1e9, "G"), (1e6, 1e6, "M"), (1e4, 1e3, "K")):
        if magnitude >= threshold:
            return f"{value / divisor:.3g}{suffix}"
    if magnitude >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def format_stats(stats: Stats | None, unit: str) -> str:
    if stats is None:
        return "—"
    text = f"{format_number(stats.median)} {unit}".strip()
    if stats.runs > 1:
        text += f" ({format_number(stats.low)}–{format_number(stats.high)})"
    return text


TABLE_HEADER = (
    "| row | rmq: median (min–max) | reference | reference: median (min–max) | ratio | target | result |\n"
    "| --- | --- | --- | --- | --- | --- | --- |"
)


def format_row(row: Row) -> str:
    ratio = "—" if row.ratio is None else f"{row.ratio:.2f}×"
    value = format_stats(row.value, row.unit) if row.value is not None else row.note
    cells = [
        row.name,
        value,
        row.reference_name or "—",
        format_stats(row.reference, row.unit),
        ratio,
        row.target.describe() if row.target else "—",
        row.verdict,
    ]
    return "| " + " | ".join(table_cell(cell) for cell in cells) + " |"


MAX_CELL = 300


def one_line(text: str) -> str:
    return " ".join(text.split())


def table_cell(text: str) -> str:
    """One table cell: one line, pipes escaped, long error texts cut."""
    flat = one_line(text).replace("|", "\\|")
    return flat if len(flat) <= MAX_CELL else flat[: MAX_CELL - 1] + "…"


def format_table(rows: Sequence[Row]) -> str:
    lines = [TABLE_HEADER, *(format_row(row) for row in rows)]
    measured_notes = [row for row in rows if row.note and row.value is not None]
    notes = [f"- {one_line(row.name)}: {one_line(row.note)}" for row in measured_notes]
    return "\n".join(lines) + ("\n\n" + "\n".join(notes) if notes else "")
