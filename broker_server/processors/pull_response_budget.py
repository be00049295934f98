"""PullResponseBudget: the bytes of pull answers the broker holds until their calls end.

A pull answer stays in the process until its call ends: the store's records, the protobuf field,
the serialized message and gRPC's slices, about 3x its size in RSS (measured: 32 unread 8 MiB
answers, +863 MiB). A client that never reads (a stopped process, a full socket) keeps its answers
there until its connection closes, and one connection may run 1024 calls of up to max_pull_bytes
each. So every pull call takes a PullBytesLease: before a read, the pull is granted at most what
is left of its connection's budget (max_inflight_pull_bytes_per_connection), of its account's
(max_inflight_pull_bytes_per_account) and of the broker's (max_inflight_pull_bytes) and reads no
more than that: one account's unread answers (its Flight streams included) never take the bytes
every other account pulls with. With nothing left it waits up to
MAX_WAIT_S for bytes to come back (a reading client's answers leave within milliseconds), then is
refused with LIMIT_EXCEEDED naming the setting. The store still answers at least one message, so
the bytes held pass a budget by less than one message per read in progress. The lease keeps the
bytes it read until the call's done callback: grpc.aio runs it on the event loop when the call
ends (answered and read, cancelled, or its connection reset), not while an unread answer sits in
a full socket.

A connection is the call's peer address (grpc.aio ServicerContext.peer: one per TCP connection);
an account is the call's access key (security.caller.account_key), its client's IP without an
ACL; the per-connection and per-account tables hold only those with bytes in flight. Waits happen on the event
loop; try_reserve and give_back may also be called from other threads (the Flight data plane's
stream threads, which so take and give back a batch's bytes without a round trip through the
loop): the counts are kept under a lock, and bytes given back from another thread wake the
waiters through the loop."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from rmq.broker_server.background_tasks import wait_for_event
from rmq.broker_server.errors import BrokerError
from rmq.broker_server.long_polling.fair_shares import adjust_count
from rmq.broker_server.security.caller import account_key
from rmq.broker_server.security.request_auth import peer_address
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


@dataclass(frozen=True)
class PullHolder:
    """Who holds pull answer bytes: an account, on one of its connections."""

    account: str
    connection: str


def call_holder(context: CallContext) -> PullHolder:
    """The running call's account (its client's IP without an ACL) on the call's connection."""
    peer = context.peer()
    return PullHolder(account_key() or peer_address(peer), peer)


class PullResponseBudget:
    def __init__(self, max_bytes: int, max_bytes_per_connection: int, max_wait_s: float = MAX_WAIT_S,
                 max_bytes_per_account: int | None = None) -> None:
        """`max_bytes_per_account` None: an account may hold up to the total."""
        self.max_bytes = max_bytes
        self.max_bytes_per_connection = max_bytes_per_connection
        self.max_bytes_per_account = max_bytes if max_bytes_per_account is None else max_bytes_per_account
        self.max_wait_s = max_wait_s
        self.held = 0
        self._by_connection: dict[str, int] = {}
        self._by_account: dict[str, int] = {}
        self._given_back = asyncio.Event()     # set (and replaced) when bytes come back to waiters
        self._waiting = 0
        self._loop: asyncio.AbstractEventLoop | None = None   # the waiters' (set by the first wait)
        self._lock = threading.Lock()

    def lease(self, context: CallContext) -> PullBytesLease:
        """A lease for the call of `context`, given back when the call ends."""
        lease = PullBytesLease(self, call_holder(context))
        context.add_done_callback(lambda _: lease.release())
        return lease

    def account_held(self, account: str) -> int:
        """The bytes `account` holds on all its connections."""
        with self._lock:
            return self._by_account.get(account, 0)

    async def reserve(self, holder: PullHolder, wanted: int) -> int:
        """Up to `wanted` bytes for a read of `holder`, waiting up to max_wait_s while its
        connection, its account or the broker has nothing left; then InflightPullBytesExceeded."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_wait_s
        while True:
            with self._lock:   # a give_back from another thread sees this waiter, or came before
                try:
                    return self._reserve_now(holder, wanted)
                except InflightPullBytesExceeded:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise
                self._loop = loop
                self._waiting += 1
                given_back = self._given_back
            try:
                await wait_for_event(given_back, remaining)
            finally:
                with self._lock:
                    self._waiting -= 1

    def try_reserve(self, holder: PullHolder, wanted: int) -> int | None:
        """reserve without waiting, from any thread: the bytes granted, None when the connection,
        the account or the broker has nothing left."""
        with self._lock:
            try:
                return self._reserve_now(holder, wanted)
            except InflightPullBytesExceeded:
                return None

    def _reserve_now(self, holder: PullHolder, wanted: int) -> int:
        on_connection = self._by_connection.get(holder.connection, 0)
        if on_connection >= self.max_bytes_per_connection:
            raise InflightPullBytesExceeded(on_connection, "max_inflight_pull_bytes_per_connection",
                                            "this connection")
        if self.held >= self.max_bytes:
            raise InflightPullBytesExceeded(self.held, "max_inflight_pull_bytes", "this broker")
        on_account = self._by_account.get(holder.account, 0)
        if on_account >= self.max_bytes_per_account:
            raise InflightPullBytesExceeded(on_account, "max_inflight_pull_bytes_per_account", "this account")
        granted = min(wanted, self.max_bytes - self.held, self.max_bytes_per_connection - on_connection,
                      self.max_bytes_per_account - on_account)
        self._add(holder, granted)
        return granted

    def give_back(self, holder: PullHolder, count: int) -> None:
        """Bytes a read no longer holds (from any thread); waiters are woken on their loop."""
        with self._lock:
            self._add(holder, -count)
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

    def _add(self, holder: PullHolder, count: int) -> None:
        self.held += count
        adjust_count(self._by_connection, holder.connection, count)
        adjust_count(self._by_account, holder.account, count)


@dataclass(eq=False)
class PullBytesLease:
    """The pull answer bytes one call holds."""

    budget: PullResponseBudget
    holder: PullHolder
    held: int = 0
    released: bool = False

    async def grant(self, wanted: int) -> int:
        """Up to `wanted` bytes for a read (PullResponseBudget.reserve); a call already ended
        holds nothing and is granted all."""
        if self.released:
            return wanted
        granted = await self.budget.reserve(self.holder, wanted)
        if self.released:     # the call ended while it waited
            self.budget.give_back(self.holder, granted)
        else:
            self.held += granted
        return granted

    def settle(self, granted: int, read: int) -> None:
        """The read granted `granted` bytes read `read`: hold those instead, until release."""
        if self.released:     # the call ended while the read ran: everything was given back
            return
        self.budget.give_back(self.holder, granted - read)
        self.held += read - granted

    def release(self) -> None:
        self.released = True
        self.budget.give_back(self.holder, self.held)
        self.held = 0
