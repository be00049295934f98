"""The broker's timer-driven services run as asyncio tasks on its event loop; stopping one
cancels its tasks and waits until each has finished."""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_all(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel `tasks` and wait for them; what they raised on the way out is dropped, and the
    list is emptied so that a second stop does nothing."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    tasks.clear()
