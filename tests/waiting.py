"""Waiting for an event in tests: poll observable state with a deadline (never a fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable

POLL_S = 0.02


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    """Return once `condition()` holds; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout_s} s"
        time.sleep(POLL_S)
