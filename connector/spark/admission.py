"""Admission control: how far each queue may advance in one micro-batch under a ReadLimit.

`ReadMaxRows(n)` is spread fairly over the queues with a backlog (water-filling: every
queue gets an equal share, shares a queue cannot use go to the others); the last units
that do not divide evenly go to the queues that are furthest behind, then in queue
order. The result depends only on the start and available offsets, never exceeds `n` in
total and always advances when there is a backlog and `n >= 1`.

`ReadMaxBytes(n)` (option maxBytesPerTrigger, alone or with maxMessagesPerTrigger) spreads `n`
bytes the same way over the queues' backlogs in bytes: each queue's messages times its record size
(as sampled by the caller), then the rows limit applies within that. A soft limit, as Spark's file
sources have it: at least one message moves when there is a backlog, however large.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    ReadMinRows,
)


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


def spread_bytes(start: Mapping[K, int], available: Mapping[K, int], record_bytes: Mapping[K, int],
                 max_bytes: int) -> dict[K, int]:
    """End offsets per key advancing about `max_bytes` in total (each key's messages weigh
    `record_bytes[key]`, at least 1), spread as spread_rows spreads rows; at least one message when
    there is a backlog."""
    weights = {key: max(record_bytes.get(key, 1), 1) for key in start}
    zero = dict.fromkeys(start, 0)
    backlog_bytes = {key: max(available.get(key, start[key]) - start[key], 0) * weights[key] for key in start}
    granted = spread_rows(zero, backlog_bytes, max_bytes)
    end = {key: start[key] + granted[key] // weights[key] for key in start}
    if end == dict(start):
        return spread_rows(start, available, 1)
    return end


def admit(start: Mapping[K, int], available: Mapping[K, int], limit: ReadLimit,
          max_bytes: int | None = None, record_bytes: Mapping[K, int] | None = None) -> dict[K, int] | None:
    """End offsets for the next micro-batch under `limit`, or None when ReadMinRows is not
    yet met (the caller then returns its start offset unchanged). `max_bytes`: maxBytesPerTrigger
    besides a ReadMaxRows limit (ReadMaxBytes carries its own), with the keys' `record_bytes`."""
    ceiling = {key: max(available.get(key, offset), offset) for key, offset in start.items()}
    if isinstance(limit, ReadMaxBytes):
        max_bytes = limit.max_bytes
    if max_bytes is not None and isinstance(limit, ReadMaxBytes | ReadMaxRows):
        ceiling = spread_bytes(start, ceiling, record_bytes or {}, max_bytes)
    if isinstance(limit, ReadMaxBytes):
        return ceiling
    if isinstance(limit, ReadMaxRows):
        return spread_rows(start, ceiling, limit.max_rows)
    if isinstance(limit, ReadMinRows):
        pending = sum(ceiling[key] - start[key] for key in start)
        return ceiling if pending >= limit.min_rows else None
    if isinstance(limit, ReadAllAvailable):
        return ceiling
    raise ValueError(f"the rmq source does not support the read limit {limit!r}")
