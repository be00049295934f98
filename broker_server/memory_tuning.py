"""Process-wide memory allocator tuning for the broker (glibc only)."""

from __future__ import annotations

import ctypes

# glibc mallopt parameters (malloc.h) and the values keep_freed_memory sets.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 16 << 20   # above a pull answer (≤ max_pull_bytes, 3 MiB by default)
_TRIM_THRESHOLD_BYTES = 64 << 20


def keep_freed_memory() -> None:
    """Let glibc reuse the freed buffers of one pull answer for the next one.

    Every pull answer passes through several buffers of its size (the store's records, the
    protobuf field, its serialization, gRPC's slices). By default glibc serves such sizes
    with mmap, or trims them off the heap once freed, so each answer pays a page fault per
    4 KiB again: ≈ 60 % of the broker's CPU per pulled 100 B message (BENCHMARKS.md,
    notes:pull-path). At most _TRIM_THRESHOLD_BYTES of free heap is kept. No-op without glibc."""
    try:
        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
    mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES)
