"""Admission control: how far each queue may advance in one micro-batch under a ReadLimit.

`ReadMaxRows(n)` is spread fairly over the queues with a backlog (water-filling: every
queue gets an equal share, shares a queue cannot use go to the others); the last units
that do not divide evenly go to the queues that are furthest behind, then in queue
order. The result depends only on the start and available offsets, never exceeds `n` in
total and always advances when there is a backlog and `n >= 1`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows


class _Ordered(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


K = TypeVar("K", bound=_Ordered)   # a MessageQueue: keys are visited in their order


def spread_rows(start: Mapping[K, int], available: Mapping[K, int], max_rows: int) -> dict[K, int]:
    """End offsets per key, advancing at most `max_rows` in total from `start` towards
    `available` (keys of `start`; a missing or smaller available offset means no backlog)."""
    keys = sorted(start)
    backlog = {key: max(available.get(key, start[key]) - start[key], 0) for key in keys}
    grant = dict.fromkeys(keys, 0)
    remaining = max_rows
    active = [key for key in keys if backlog[key] > 0]
    while remaining > 0 and active:
        share = remaining // len(active)
        if share == 0:
            # Fewer units than queues: the queues furthest behind first (stable: then queue order).
            for key in sorted(active, key=lambda k: start[k])[:remaining]:
                grant[key] += 1
            break
        still_active = []
        for key in active:
            taken = min(share, backlog[key] - grant[key])
            grant[key] += taken
            remaining -= taken
            if grant[key] < backlog[key]:
                still_active.append(key)
        active = still_active
    return {key: start[key] + grant[key] for key in keys}


def admit(start: Mapping[K, int], available: Mapping[K, int], limit: ReadLimit) -> dict[K, int] | None:
    """End offsets for the next micro-batch under `limit`, or None when ReadMinRows is not
    yet met (the caller then returns its start offset unchanged)."""
    ceiling = {key: max(available.get(key, offset), offset) for key, offset in start.items()}
    if isinstance(limit, ReadMaxRows):
        return spread_rows(start, ceiling, limit.max_rows)
    if isinstance(limit, ReadMinRows):
        pending = sum(ceiling[key] - start[key] for key in start)
        return ceiling if pending >= limit.min_rows else None
    if isinstance(limit, ReadAllAvailable):
        return ceiling
    raise ValueError(f"the rmq source does not support the read limit {limit!r}")
