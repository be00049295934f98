"""Aggregate throughput of several producer processes started together: each sets up (process
start-up and connections are not timed), waits on a shared barrier, runs its share, and reports
its start and end; the rate is all items over first start to last end."""

from __future__ import annotations

import functools
import multiprocessing
import time
from collections.abc import Callable
from typing import Any

from bench import machine

_CONTEXT = multiprocessing.get_context("spawn")   # no fork: gRPC's threads do not survive it
JOIN_TIMEOUT_S = 300


def _timed(barrier, results, work: Callable[..., Any], args: tuple, prepared: bool) -> None:
    try:
        run = work(*args) if prepared else functools.partial(work, *args)
    except Exception as error:  # noqa: BLE001 - reported to the parent, which raises
        results.put(f"{type(error).__name__}: {error}")
        barrier.abort()
        raise
    barrier.wait()
    start = time.perf_counter()
    try:
        run()
    except Exception as error:  # noqa: BLE001 - reported to the parent, which raises
        results.put(f"{type(error).__name__}: {error}")
        raise
    results.put((start, time.perf_counter()))


def parallel_rate(work: Callable[..., Any], args: tuple, processes: int, count_each: int) -> float:
    """Items/s of `processes` processes each calling work(*args) for `count_each` items;
    `work` must be a module-level function (spawned processes import it by name)."""
    return parallel_measure(work, args, processes, count_each, prepared=False)[0]


def parallel_measure(work: Callable[..., Any], args: tuple, processes: int, count_each: int, *,
                     prepared: bool = True, server_pid: int | None = None) -> tuple[float, float]:
    """(items/s, the CPU µs per item of the process `server_pid` while they ran, 0 without one).
    `prepared`: work(*args) sets up untimed and returns the timed run (a callable of nothing)."""
    barrier, results = _CONTEXT.Barrier(processes + 1), _CONTEXT.Queue()
    workers = [_CONTEXT.Process(target=_timed, args=(barrier, results, work, args, prepared))
               for _ in range(processes)]
    for worker in workers:
        worker.start()
    try:
        try:
            barrier.wait(JOIN_TIMEOUT_S)     # every worker set up: the timed part starts
        except Exception:  # noqa: BLE001 - a worker failed to set up: its error is in the queue
            raise RuntimeError(f"a producer process failed: {results.get(timeout=JOIN_TIMEOUT_S)}") from None
        cpu_before = machine.process_cpu_seconds(server_pid) if server_pid else 0.0
        spans = [results.get(timeout=JOIN_TIMEOUT_S) for _ in workers]
        cpu = machine.process_cpu_seconds(server_pid) - cpu_before if server_pid else 0.0
        errors = [span for span in spans if isinstance(span, str)]
        if errors:
            raise RuntimeError(f"a producer process failed: {errors[0]}")
    finally:
        for worker in workers:
            worker.join(JOIN_TIMEOUT_S)
            if worker.is_alive():
                worker.kill()
    items = processes * count_each
    return items / (max(end for _, end in spans) - min(start for start, _ in spans)), cpu / items * 1e6
