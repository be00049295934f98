"""The servers' event loop (issue 41): uvloop's when the `uvloop` package is installed (the
`broker` extra brings it: a loop round trip costs about half of asyncio's), else asyncio's own;
`RMQ_EVENT_LOOP=asyncio` keeps asyncio's even where uvloop is installed. Nothing else depends on
which one runs: the broker uses only the asyncio API."""

from __future__ import annotations

import asyncio
import enum
import importlib
import logging
import os
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger(__name__)

EVENT_LOOP_ENV = "RMQ_EVENT_LOOP"


class LoopKind(enum.Enum):
    UVLOOP = "uvloop"
    ASYNCIO = "asyncio"


LoopFactory = Callable[[], asyncio.AbstractEventLoop]


def choose_loop() -> tuple[LoopKind, LoopFactory]:
    """The loop the servers run on and how to make one."""
    if os.environ.get(EVENT_LOOP_ENV, "") != LoopKind.ASYNCIO.value:
        try:
            uvloop = importlib.import_module("uvloop")
        except ImportError:
            pass
        else:
            factory: LoopFactory = uvloop.new_event_loop
            return LoopKind.UVLOOP, factory
    return LoopKind.ASYNCIO, asyncio.new_event_loop


def run(serve: Callable[[], Coroutine[Any, Any, None]]) -> LoopKind:
    """Run `serve()` to its end on the chosen loop; the loop it ran on."""
    kind, factory = choose_loop()
    log.info("event loop: %s", kind.value)
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve())
    return kind
