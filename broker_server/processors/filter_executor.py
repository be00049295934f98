"""Where the broker evaluates SQL92 filters (docs/filtering-and-bounds.md): never on the event loop,
and within a broker-wide CPU budget shared fairly between accounts.

The budget is `filter_threads` threads (BrokerConfig; default 1): filters together never use more
than that many threads, so sends, tag pulls and the event loop keep the rest of the machine. Each
filtered read is one slice of work: at most FILTER_SLICE_TOKENS expression tokens evaluated (about
10 ms here; `slice_evaluations` turns that into records for one filter), after which the read ends
and its answer says where the next one starts. Reads wait in one queue per account and the threads
serve the accounts in turn, one slice each, so of n accounts with filtered reads waiting each gets
at least 1/n of the budget, whatever its filters cost, and a read waits for at most one slice per
other account. An account may have at most `max_pending_per_account` reads waiting (LIMIT_EXCEEDED
past it)."""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from rmq.broker_server.errors import BrokerError
from rmq.v1 import rmq_pb2

T = TypeVar("T")
FILTER_SLICE_TOKENS = 16_384          # tokens evaluated per slice: ~0.55 µs each on the 2-core machine
DEFAULT_MAX_PENDING_PER_ACCOUNT = 4096


def slice_evaluations(filter_cost: int) -> int:
    """How many records a filter of `filter_cost` tokens evaluates in one slice (at least one)."""
    return max(1, FILTER_SLICE_TOKENS // max(1, filter_cost))


@dataclass
class _Job:
    function: Callable[[], Any]
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop


class FilterExecutor:
    def __init__(self, threads: int, max_pending_per_account: int = DEFAULT_MAX_PENDING_PER_ACCOUNT) -> None:
        self.max_pending_per_account = max_pending_per_account
        self._ready = threading.Condition()
        self._waiting: OrderedDict[str, deque[_Job]] = OrderedDict()   # accounts in turn order
        self._stopped = False
        self._threads = [threading.Thread(target=self._work, name=f"filter-{n}", daemon=True)
                         for n in range(threads)]
        for thread in self._threads:
            thread.start()

    async def run(self, account: str, function: Callable[[], T]) -> T:
        """`function()` (one slice) on a filter thread, in `account`'s turn."""
        loop = asyncio.get_running_loop()
        job = _Job(function, loop.create_future(), loop)
        with self._ready:
            if self._stopped:
                raise BrokerError(rmq_pb2.SERVICE_NOT_AVAILABLE, "the broker is shutting down")
            jobs = self._waiting.setdefault(account, deque())
            if len(jobs) >= self.max_pending_per_account:
                raise BrokerError(rmq_pb2.LIMIT_EXCEEDED,
                                   f"this account already has {len(jobs)} filtered reads waiting "
                                   f"(max_pending_filter_reads_per_account): pull again later")
            jobs.append(job)
            self._ready.notify()
        result: T = await job.future   # what function() returned (_work sets it)
        return result

    def pending(self, account: str) -> int:
        """Reads of `account` waiting for a filter thread (tests and diagnostics)."""
        with self._ready:
            return len(self._waiting.get(account, ()))

    def shutdown(self) -> None:
        """Finish the slices running, fail the waiting ones, stop the threads."""
        with self._ready:
            self._stopped = True
            abandoned = [job for jobs in self._waiting.values() for job in jobs]
            self._waiting.clear()
            self._ready.notify_all()
        for job in abandoned:
            _settle(job, None, BrokerError(rmq_pb2.SERVICE_NOT_AVAILABLE, "the broker is shutting down"))
        for thread in self._threads:
            thread.join()

    def _next(self) -> _Job | None:
        """The first waiting read of the account whose turn it is (None once stopped); that account
        goes to the back of the turn order."""
        with self._ready:
            while not self._waiting and not self._stopped:
                self._ready.wait()
            if self._stopped:
                return None
            account, jobs = next(iter(self._waiting.items()))
            job = jobs.popleft()
            if jobs:
                self._waiting.move_to_end(account)
            else:
                del self._waiting[account]
            return job

    def _work(self) -> None:
        while (job := self._next()) is not None:
            if job.future.cancelled():      # its call ended while it waited
                continue
            try:
                result, error = job.function(), None
            except Exception as failure:   # handed to the caller, which answers it
                result, error = None, failure
            _settle(job, result, error)


def _settle(job: _Job, result: Any, error: BaseException | None) -> None:
    def settle() -> None:
        if job.future.done():
            return
        if error is not None:
            job.future.set_exception(error)
        else:
            job.future.set_result(result)

    try:
        job.loop.call_soon_threadsafe(settle)
    except RuntimeError:   # the loop is closed: nobody waits any more
        pass
