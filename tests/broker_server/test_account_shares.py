"""Per-account shares of the broker's bounded tables (issue #25, weaknesses and item 7): one account
holding the whole long-polling hold table, or filling the consumer-offset table, no longer locks
the other accounts out. The account is the call's (rmq.broker_server.caller)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import pytest

from rmq.broker_server.caller import Caller, admitted
from rmq.broker_server.long_polling import HoldTableFull, PullRequestHoldService

T = TypeVar("T")


async def as_account(account: str, call: Awaitable[T]) -> T:
    admitted(Caller(account, lambda: pytest.fail("shares never consult the ACL")))  # this task only
    return await call


def test_a_full_hold_table_gives_each_account_its_share() -> None:
    """One account took all 300 held pulls; now a pull of an account holding fewer releases the
    largest holder's oldest pull (answered now, as at its timeout) and is held."""
    async def scenario() -> None:
        service = PullRequestHoldService(lambda topic, queue_id: 0, check_interval_ms=60000, max_held=4)
        service.start()
        hog = [asyncio.create_task(as_account("hog", service.suspend("T", q, 0, None, 60000)))
               for q in range(4)]
        await asyncio.sleep(0.01)
        assert service.held_count("hog") == 4
        with pytest.raises(HoldTableFull):        # the hog itself gets no more than the table
            await as_account("hog", service.suspend("T", 9, 0, None, 60000))
        polite = [asyncio.create_task(as_account("polite", service.suspend("U", q, 0, None, 60000)))
                  for q in range(2)]
        await asyncio.wait_for(asyncio.gather(*hog[:2]), 5)      # the hog's two oldest answered
        assert not any(task.done() for task in hog[2:] + polite)
        assert (service.held_count("hog"), service.held_count("polite"), service.held_count()) == (2, 2, 4)
        with pytest.raises(HoldTableFull):        # 2 and 2: an equal share, nobody is displaced
            await as_account("polite", service.suspend("U", 9, 0, None, 60000))
        with pytest.raises(HoldTableFull):
            await as_account("hog", service.suspend("T", 9, 0, None, 60000))
        third = asyncio.create_task(as_account("third", service.suspend("V", 0, 0, None, 60000)))
        await asyncio.sleep(0.01)
        assert service.held_count("third") == 1 and service.held_count() == 4
        assert sum(task.done() for task in hog[2:] + polite) == 1   # one of the two largest gave way
        service.shutdown()
        await asyncio.wait_for(asyncio.gather(*hog, *polite, third), 5)
        assert service.held_count() == 0

    asyncio.run(asyncio.wait_for(scenario(), 10))
