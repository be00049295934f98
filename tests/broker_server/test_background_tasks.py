"""The broker's service loops stop when cancelled (rmq.broker_server.background_tasks): the
timer store's rounds, the name-server registration and the pull budget wait with
`wait_for_event`, which a stop's cancellation always gets through."""

from __future__ import annotations

import asyncio

from rmq.broker_server.background_tasks import cancel_all, wait_for_event


async def _service_loop(wake: asyncio.Event, rounds: list[bool]) -> None:
    """A service's loop as the timer store's: a round, then a wait for a wake or the period."""
    while True:
        wake.clear()
        rounds.append(await wait_for_event(wake, 5.0))


def test_a_service_loop_woken_in_the_turn_it_is_stopped_still_stops() -> None:
    """The stop (`cancel_all`) and a wake (a put's notification) in the same loop turn: the loop
    ends. With asyncio.wait_for on Python 3.11 the wake's result replaced the cancellation, the
    loop went round again and the stop never returned (a timer test's broker hung 30 s in CI)."""

    async def woken_and_stopped() -> bool:
        wake, rounds = asyncio.Event(), []
        task = asyncio.create_task(_service_loop(wake, rounds))
        while not wake._waiters:   # type: ignore[attr-defined]   # parked in its wait
            await asyncio.sleep(0)
        wake.set()
        stop = asyncio.create_task(cancel_all([task]))
        done, _ = await asyncio.wait([stop], timeout=2.0)   # the loop's own period is 5 s
        task.cancel()   # once more, for a loop that went on
        await asyncio.gather(stop, task, return_exceptions=True)
        return stop in done

    assert asyncio.run(woken_and_stopped()), "the loop went round again after its stop"


def test_wait_for_event_says_whether_the_event_came_or_the_time_ran_out() -> None:
    async def both() -> tuple[bool, bool]:
        event = asyncio.Event()
        asyncio.get_running_loop().call_soon(event.set)
        return await wait_for_event(event, 5.0), await wait_for_event(asyncio.Event(), 0.01)

    assert asyncio.run(both()) == (True, False)
