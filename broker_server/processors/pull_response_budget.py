"""PullResponseBudget: the bytes of pull answers the broker holds until their calls end.

A pull answer stays in the process until its call ends: the store's records, the protobuf field,
the serialized message and gRPC's slices, about 3x its size in RSS (measured: 32 unread 8 MiB
answers, +863 MiB). A client that never reads (a stopped process, a full socket) keeps its answers
there until its connection closes, and one connection may run 1024 calls of up to max_pull_bytes
each. So every pull call takes a PullBytesLease: before a read, the pull is granted at most what
is left of its connection's budget (max_inflight_pull_bytes_per_connection) and of the broker's
(max_inflight_pull_bytes) and reads no more than that. With nothing left it waits up to
MAX_WAIT_S for bytes to come back (a reading client's answers leave within milliseconds), then is
refused with LIMIT_EXCEEDED naming the setting. The store still answers at least one message, so
the bytes held pass a budget by less than one message per read in progress. The lease keeps the
bytes it read until the call's done callback: grpc.aio runs it on the event loop when the call
ends (answered and read, cancelled, or its connection reset), not while an unread answer sits in
a full socket.

A connection is the call's peer address (grpc.aio ServicerContext.peer: one per TCP connection);
the per-connection table holds only connections with bytes in flight. Waits happen on the event
loop; try_reserve and give_back may also be called from other threads (the Flight data plane's
stream threads, which so take and give back a batch's bytes without a round trip through the
loop): the counts are kept under a lock, and bytes given back from another thread wake the
waiters through the loop."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from rmq.broker_server.errors import BrokerError
from rmq.v1 import rmq_pb2

MAX_WAIT_S = 1.0


class CallContext(Protocol):
    """What a lease needs of a grpc.aio ServicerContext."""

    def peer(self) -> str: ...

    # called with the context when the call ends; Any because grpc's stubs type the callback as a
    # check-only class that no function is
    def add_done_callback(self, callback: Any) -> None: ...


class InflightPullBytesExceeded(BrokerError):
    def __init__(self, held: int, setting: str, scope: str) -> None:
        super().__init__(
            rmq_pb2.LIMIT_EXCEEDED,
            f"{scope} already holds {held} bytes of pull answers not yet read ({setting}): "
            "read them, or pull again later",
        )


class PullResponseBudget:
    def __init__(self, max_bytes: int, max_bytes_per_connection: int, max_wait_s: float = MAX_WAIT_S) -> None:
        self.max_bytes = max_bytes
        self.max_bytes_per_connection = max_bytes_per_connection
        self.max_wait_s = max_wait_s
        self.held = 0
        self._by_connection: dict[str, int] = {}
        self._given_back = asyncio.Event()     # set (and replaced) when bytes come back to waiters
        self._waiting = 0
        self._loop: asyncio.AbstractEventLoop | None = None   # the waiters' (set by the first wait)
        self._lock = threading.Lock()

    def lease(self, context: CallContext) -> PullBytesLease:
        """A lease for the call of `context`, given back when the call ends."""
        lease = PullBytesLease(self, context.peer())
        context.add_done_callback(lambda _: lease.release())
        return lease

    async def reserve(self, connection: str, wanted: int) -> int:
        """Up to `wanted` bytes for a read on `connection`, waiting up to max_wait_s while the
        connection or the broker has nothing left; then InflightPullBytesExceeded."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait_s
        while True:
            with self._lock:   # a give_back from another thread sees this waiter, or came before
                try:
                    return self._reserve_now(connection, wanted)
                except InflightPullBytesExceeded:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise
                self._loop = loop
                self._waiting += 1
                given_back = self._given_back
            try:
                await asyncio.wait_for(given_back.wait(), remaining)
            except TimeoutError:
                pass
            finally:
                with self._lock:
                    self._waiting -= 1

    def try_reserve(self, connection: str, wanted: int) -> int | None:
        """reserve without waiting, from any thread: the bytes granted, None when the connection
        or the broker has nothing left."""
        with self._lock:
            try:
                return self._reserve_now(connection, wanted)
            except InflightPullBytesExceeded:
                return None

    def _reserve_now(self, connection: str, wanted: int) -> int:
        on_connection = self._by_connection.get(connection, 0)
        if on_connection >= self.max_bytes_per_connection:
            raise InflightPullBytesExceeded(on_connection, "max_inflight_pull_bytes_per_connection",
                                            "this connection")
        if self.held >= self.max_bytes:
            raise InflightPullBytesExceeded(self.held, "max_inflight_pull_bytes", "this broker")
        granted = min(wanted, self.max_bytes - self.held, self.max_bytes_per_connection - on_connection)
        self._add(connection, granted)
        return granted

    def give_back(self, connection: str, count: int) -> None:
        """Bytes a read no longer holds (from any thread); waiters are woken on their loop."""
        with self._lock:
            self._add(connection, -count)
            wake = count > 0 and self._waiting > 0
        if not wake or self._loop is None:
            return
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:   # no loop runs in this thread
            on_loop = False
        if on_loop:
            self._wake()
        else:
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._given_back.set()
        self._given_back = asyncio.Event()

    def _add(self, connection: str, count: int) -> None:
        self.held += count
        left = self._by_connection.get(connection, 0) + count
        if left:
            self._by_connection[connection] = left
        else:
            self._by_connection.pop(connection, None)


@dataclass(eq=False)
class PullBytesLease:
    """The pull answer bytes one call holds."""

    budget: PullResponseBudget
    connection: str
    held: int = 0
    released: bool = False

    async def grant(self, wanted: int) -> int:
        """Up to `wanted` bytes for a read (PullResponseBudget.reserve); a call already ended
        holds nothing and is granted all."""
        if self.released:
            return wanted
        granted = await self.budget.reserve(self.connection, wanted)
        if self.released:     # the call ended while it waited
            self.budget.give_back(self.connection, granted)
        else:
            self.held += granted
        return granted

    def settle(self, granted: int, read: int) -> None:
        """The read granted `granted` bytes read `read`: hold those instead, until release."""
        if self.released:     # the call ended while the read ran: everything was given back
            return
        self.budget.give_back(self.connection, granted - read)
        self.held += read - granted

    def release(self) -> None:
        self.released = True
        self.budget.give_back(self.connection, self.held)
        self.held = 0
