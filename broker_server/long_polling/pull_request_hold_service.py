"""Long polling (RocketMQ PullRequestHoldService, spec consumer-pull-rebalance §14, TV-17;
consumption-longpolling-offsets §9): a pull that finds no new message is held in a
`topic@queueId` table and released as soon as a matching message is dispatched to its queue,
when its hold time runs out, or on shutdown; the caller then re-runs the pull without
suspending (brokerAllowSuspend = false).

Held pulls are asyncio futures on the server's event loop: waiting costs no CPU and no
thread. The store's dispatch thread looks the queue up in the table and resolves matching
futures with `call_soon_threadsafe`; a queue nobody waits on costs one dict lookup. Each held
pull has its own timer, so it is answered at its suspend timeout; the periodic check (5 s,
or the short-polling time) is the fallback for arrivals the notification missed.

The table holds at most `max_held` pulls (BrokerConfig.max_held_pulls), shared fairly between
accounts (fair_shares): when it is full, a pull of an account holding fewer than the account
holding most releases that account's oldest held pull (answered now, as at its timeout: its
client simply pulls again) and takes its place; any other is refused with LIMIT_EXCEEDED
(`HoldTableFull`). So clients cannot make the broker hold an unbounded number of futures and
timers, and one account holding the whole table does not lock the others out: each of n
accounts keeps at least max_held // n."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.long_polling.fair_shares import FairShares, ShareExceeded
from rmq.broker_server.security.caller import account_key
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)
TOPIC_QUEUEID_SEPARATOR = "@"
DEFAULT_MAX_HELD = 65536


class HoldTableFull(BrokerError):
    """The hold table is at its bound: the pull is refused, not held."""

    def __init__(self, max_held: int) -> None:
        super().__init__(
            rmq_pb2.LIMIT_EXCEEDED,
            f"this broker already holds {max_held} pulls (max_held_pulls): pull again later",
        )


def build_key(topic: str, queue_id: int) -> str:
    return f"{topic}{TOPIC_QUEUEID_SEPARATOR}{queue_id}"


@dataclass(eq=False)
class HeldPullRequest:
    """A suspended pull (broker-side PullRequest): woken when its queue's max offset passes
    `pull_from_this_offset` with a message whose tag code it subscribes to."""

    pull_from_this_offset: int
    tag_codes: frozenset[int] | None  # None: every tag ("*")
    future: asyncio.Future[None] = field(repr=False)
    key: str = ""       # topic@queueId
    account: str = ""   # whose share it counts against
    timer: asyncio.TimerHandle | None = field(default=None, repr=False)

    def matches(self, tags_code: int | None) -> bool:
        """ExpressionMessageFilter#isMatchedByConsumeQueue: an unknown tag code (periodic
        check) matches, so the re-run pull decides."""
        return self.tag_codes is None or tags_code is None or tags_code in self.tag_codes


class PullRequestHoldService:
    def __init__(
        self,
        max_offset_in_queue: Callable[[str, int], int],
        long_polling_enable: bool = True,
        check_interval_ms: int = 5000,
        short_polling_time_ms: int = 1000,
        max_held: int = DEFAULT_MAX_HELD,
    ) -> None:
        self._max_offset_in_queue = max_offset_in_queue
        self.max_held = max_held
        self._shares: FairShares[HeldPullRequest] = FairShares(max_held)   # the same requests, by account
        self.long_polling_enable = long_polling_enable
        self.check_interval_ms = check_interval_ms if long_polling_enable else short_polling_time_ms
        self.short_polling_time_ms = short_polling_time_ms
        # key -> held requests in arrival order (a dict used as an ordered set: O(1) removal)
        self._table: dict[str, dict[HeldPullRequest, None]] = {}
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._check_task: asyncio.Task[None] | None = None
        self._stopped = False

    def start(self) -> None:
        """Start the periodic check on the running event loop."""
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._check_task = self._loop.create_task(self._run())

    async def suspend(
        self, topic: str, queue_id: int, offset: int, tag_codes: frozenset[int] | None, timeout_ms: int
    ) -> None:
        """Hold the caller until a matching message arrives at or after `offset`, the hold
        time passes (`timeout_ms`, or the short-polling time without long polling) or the
        service stops. Raises HoldTableFull when `max_held` pulls are held already and the calling
        account holds at least as many as any other."""
        if self._stopped:
            return
        if not self.long_polling_enable:
            timeout_ms = self.short_polling_time_ms
        loop = asyncio.get_running_loop()
        key = build_key(topic, queue_id)
        request = HeldPullRequest(offset, tag_codes, loop.create_future(), key, account_key())
        with self._lock:
            try:
                displaced = self._shares.admit(request.account, request)
            except ShareExceeded:
                raise HoldTableFull(self.max_held) from None
            if displaced is not None:
                self._unlink_from_queue(displaced)
            self._table.setdefault(key, {})[request] = None
        if displaced is not None:
            self._wake([displaced])
        request.timer = loop.call_later(timeout_ms / 1000, _resolve, [request])
        # A message dispatched between the caller's pull and the line above found nobody to
        # wake: look once more now that the request is visible.
        max_offset = self._max_offset_in_queue(topic, queue_id)
        if max_offset > offset:
            self.notify_message_arriving(topic, queue_id, max_offset)
        try:
            await request.future
        finally:
            if request.timer is not None:
                request.timer.cancel()
            self._remove(key, request)

    def notify_message_arriving(
        self, topic: str, queue_id: int, max_offset: int, tags_code: int | None = None
    ) -> None:
        """Release the held pulls of the queue that `max_offset` (one past the newest entry)
        has passed and whose filter matches `tags_code`. Thread-safe."""
        key = build_key(topic, queue_id)
        if key not in self._table:
            return
        with self._lock:
            requests = self._table.get(key)
            if not requests:
                return
            woken = [r for r in requests if max_offset > r.pull_from_this_offset and r.matches(tags_code)]
            for request in woken:
                self._unlink(request)
        self._wake(woken)

    def on_dispatch(self, topic: str, queue_id: int, consume_queue_offset: int, tags_code: int) -> None:
        """The store dispatched a ConsumeQueue entry (ReputMessageService#doReput ->
        NotifyMessageArrivingListener): its logical max offset is consume_queue_offset + 1.
        Nothing more when no pull is held (the table read without the lock, as
        notify_message_arriving reads it)."""
        if self.long_polling_enable and self._table:
            self.notify_message_arriving(topic, queue_id, consume_queue_offset + 1, tags_code)

    def wake_topic(self, topic: str) -> None:
        """Release every pull held on `topic` (the topic was deleted)."""
        prefix = topic + TOPIC_QUEUEID_SEPARATOR
        with self._lock:
            keys = [key for key in self._table if key.startswith(prefix)]
            woken = [request for key in keys for request in self._table[key]]
            for request in woken:
                self._unlink(request)
        self._wake(woken)

    def held_count(self, account: str | None = None) -> int:
        """How many pulls the table holds now, in all or of one account (tests and diagnostics)."""
        with self._lock:
            return self._shares.count(account)

    def check_hold_requests(self) -> None:
        """checkHoldRequest: compare every held queue with the store's max offset."""
        for key in list(self._table):
            topic, _, queue_id = key.rpartition(TOPIC_QUEUEID_SEPARATOR)
            try:
                self.notify_message_arriving(
                    topic, int(queue_id), self._max_offset_in_queue(topic, int(queue_id))
                )
            except Exception:
                log.exception("check hold request failed. topic=%s, queueId=%s", topic, queue_id)

    def shutdown(self) -> None:
        """Release every held pull (each is answered with what the store has now) and refuse
        to hold new ones."""
        self._stopped = True
        if self._check_task is not None:
            self._check_task.cancel()
        with self._lock:
            woken = [request for requests in self._table.values() for request in requests]
            self._table.clear()
            self._shares.clear()
        self._wake(woken)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_ms / 1000)
            self.check_hold_requests()

    def _remove(self, key: str, request: HeldPullRequest) -> None:
        with self._lock:
            if request in self._table.get(key, ()):
                self._unlink(request)

    def _unlink(self, request: HeldPullRequest) -> None:
        """Take a held request out of the table and its account's share (under the lock)."""
        self._shares.remove(request.account, request)
        self._unlink_from_queue(request)

    def _unlink_from_queue(self, request: HeldPullRequest) -> None:
        requests = self._table[request.key]
        del requests[request]
        if not requests:
            del self._table[request.key]

    def _wake(self, requests: list[HeldPullRequest]) -> None:
        if not requests:
            return
        if threading.get_ident() == self._loop_thread:
            _resolve(requests)
            return
        try:
            requests[0].future.get_loop().call_soon_threadsafe(_resolve, requests)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            pass


def _resolve(requests: list[HeldPullRequest]) -> None:
    for request in requests:
        if not request.future.done():
            request.future.set_result(None)
