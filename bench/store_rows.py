"""Row 1: the store's own benchmark (`bench/store_bench.py`, owned with the store) as rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.environment import Environment
from bench.harness import Row, Stats, Target

TARGET = Target(min_ratio=0.33)


def store_rows(env: Environment) -> list[Row]:
    """MessageStore appends (put_messages, ASYNC flush) and batch reads (get_message) in
    process, against raw sequential writes/reads of the same bytes into a file-backed mmap
    from Python. Rows come from `bench.store_bench.run(repeats)`."""
    from bench.store_bench import run

    return [row_from_store(result) for result in run(env.scale.repeats)]


def row_from_store(result: Mapping[str, Any]) -> Row:
    """A store_bench result {name, value, unit, reference, ratio} (optionally low/high,
    reference_low/reference_high, reference_name, note) as a Row."""
    value = _stats(result["value"], result.get("low"), result.get("high"))
    reference = _stats(result["reference"], result.get("reference_low"), result.get("reference_high"))
    return Row(str(result["name"]), str(result["unit"]), value, str(result.get("reference_name", "raw mmap")),
               reference, TARGET, str(result.get("note", "")))


def _stats(median: float, low: float | None, high: float | None) -> Stats:
    if low is None or high is None:
        return Stats(median, median, median, 1)
    return Stats(median, low, high, 3)
