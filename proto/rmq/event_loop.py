"""The event loop rmq code runs on: uvloop's when it is installed (the `fast` extra), else
asyncio's own; `RMQ_UVLOOP=0` chooses asyncio's even then. uvloop is optional at run time:
nothing else changes with the choice."""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
UVLOOP_ENV = "RMQ_UVLOOP"


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop.new_event_loop when uvloop imports and $RMQ_UVLOOP is not 0, else asyncio's."""
    if os.environ.get(UVLOOP_ENV, "1").strip() in ("0", "false", "no", "off"):
        return asyncio.new_event_loop
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return asyncio.new_event_loop
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on the loop `loop_factory` makes."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """"uvloop" or "asyncio": which implementation runs `loop` (for reports and logs)."""
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"
