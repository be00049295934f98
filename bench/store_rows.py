"""Row 1: the store's own benchmark (`bench/store_bench.py`, owned with the store) as rows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.environment import Environment
from bench.harness import Row, Stats, Target

TARGET = Target(min_ratio=0.33)


def store_rows(env: Environment) -> list[Row]:
    """MessageStore appends (put_messages in batches of 256, ASYNC flush) and batch reads
    (get_message, max 1024) in process, for 100-byte and 1 KiB bodies, against raw sequential
    slice writes/reads of the same record bytes into a file-backed mmap from Python,
    alternately in the same run. Rows come from `bench.store_bench.run`."""
    from bench.store_bench import BODY_SIZES, run

    # Full sizes: 200,000 messages of 100 B and 100,000 of 1 KiB (store_bench's defaults).
    messages = {size: env.scale.produce_messages * (2 if size < 1024 else 1) for size in BODY_SIZES}
    return [row_from_store(result, env.scale.repeats) for result in run(env.scale.repeats, messages)]


def row_from_store(result: Mapping[str, Any], repeats: int) -> Row:
    """A store_bench result {name, value, unit, reference, ratio, low, high, reference_low,
    reference_high, reference_name, note} as a Row."""
    value = Stats(result["value"], result["low"], result["high"], repeats)
    reference = Stats(result["reference"], result["reference_low"], result["reference_high"], repeats)
    return Row(f"{result['name']} ({result['unit']})", str(result["unit"]), value,
               str(result["reference_name"]), reference, TARGET, str(result.get("note", "")))
