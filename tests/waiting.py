"""How a test waits for an event: poll observable state (a consumer list, the hold table, a
metric, a log line) until it holds or a deadline passes, never a fixed sleep. The deadline is
generous (a loaded 2-core machine) and only costs time when the test fails; a passing test
waits exactly as long as the event takes. See TESTING.md, *Waiting for events*."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

WAIT_S = 30.0      # how long an event may take on a loaded machine before the test fails
POLL_S = 0.01      # how often the state is looked at


def _describe(what: str | Callable[[], str]) -> str:
    return what if isinstance(what, str) else what()


def _check(condition: Callable[[], T], what: str | Callable[[], str], timeout: float, deadline: float) -> T:
    """`condition()`'s value; a false one past the deadline fails the test naming `what`."""
    value = condition()
    if not value and time.monotonic() >= deadline:
        raise AssertionError(f"not within {timeout} s: {_describe(what)}")
    return value


def wait_until(condition: Callable[[], T], what: str | Callable[[], str], timeout: float = WAIT_S,
               interval: float = POLL_S) -> T:
    """The first true value of `condition()`; fails naming `what` (a text, or a function that
    describes the state at the deadline) once `timeout` seconds passed without one."""
    deadline = time.monotonic() + timeout
    while not (value := _check(condition, what, timeout, deadline)):
        time.sleep(interval)
    return value


async def wait_until_async(condition: Callable[[], T], what: str | Callable[[], str],
                           timeout: float = WAIT_S) -> T:
    """`wait_until` for a test running on an event loop: the loop runs while it waits."""
    deadline = time.monotonic() + timeout
    while not (value := _check(condition, what, timeout, deadline)):
        await asyncio.sleep(POLL_S)
    return value
