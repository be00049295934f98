"""The broker's timer-driven services run as asyncio tasks on its event loop; stopping one
cancels its tasks and waits until each has finished, so their waits must let a cancellation through."""

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


async def wait_for_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Until `event` is set (True) or `timeout_s` has passed (False). Not asyncio.wait_for: on
    Python 3.11 it swallows a cancellation that arrives in the loop turn the event is set in
    (it returns the event's result instead), so a service loop cancelled then goes round again
    and `cancel_all` never returns; asyncio.timeout tells its own cancellation from another's."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True
