"""Aggregate throughput of several producer processes started together: each waits on a
shared barrier (process start-up is not timed), runs its share, and reports its start and
end; the rate is all items over first start to last end."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from typing import Any

_CONTEXT = multiprocessing.get_context("spawn")   # no fork: gRPC's threads do not survive it
JOIN_TIMEOUT_S = 300


def _timed(barrier, results, work: Callable[..., Any], args: tuple) -> None:
    barrier.wait()
    start = time.perf_counter()
    try:
        work(*args)
    except Exception as error:  # noqa: BLE001 - reported to the parent, which raises
        results.put(f"{type(error).__name__}: {error}")
        raise
    results.put((start, time.perf_counter()))


def parallel_rate(work: Callable[..., Any], args: tuple, processes: int, count_each: int) -> float:
    """Items/s of `processes` processes each calling work(*args) for `count_each` items;
    `work` must be a module-level function (spawned processes import it by name)."""
    barrier, results = _CONTEXT.Barrier(processes), _CONTEXT.Queue()
    workers = [_CONTEXT.Process(target=_timed, args=(barrier, results, work, args)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    try:
        spans = [results.get(timeout=JOIN_TIMEOUT_S) for _ in workers]
        errors = [span for span in spans if isinstance(span, str)]
        if errors:
            raise RuntimeError(f"a producer process failed: {errors[0]}")
    finally:
        for worker in workers:
            worker.join(JOIN_TIMEOUT_S)
            if worker.is_alive():
                worker.kill()
    return processes * count_each / (max(end for _, end in spans) - min(start for start, _ in spans))
