"""PopMessageProcessor (RocketMQ 5 PopMessageProcessor; spec rocketmq-v2-protocol.md §1, §4): pop
consumption, protocol-neutral. A protocol adapter asks for a pop with a `PopMessageHeader`
(RocketMQ PopMessageRequestHeader) and gets `Popped` deliveries, each with its receipt handle's
text; refusals are BrokerError leaves. AckMessageProcessor and ChangeInvisibleTimeProcessor end,
move to the DLQ or extend the deliveries through this processor's pop state, as RocketMQ's do
through the PopMessageProcessor's queue locks and long polling.

A receive looks at the topic's queues in turn: messages whose invisibility has ended come back
first with their delivery attempt + 1 (a concurrent group's message that already had
`max_attempts` deliveries goes to the group's DLQ `%DLQ%<group>` instead, as the proxy does at
receive time), then new messages from the queue's pop offset that match the filter. A FIFO
group's queue hands nothing out while one of its messages is in flight, so the messages of a
message group (one queue, by hash) are consumed in order. With nothing to hand out the
receive is held on the same wake-up path as rmq.v1 pulls (PullRequestHoldService) until a
message arrives, an in-flight message becomes visible again, an ack or change frees a FIFO
queue, or the long-polling time ends. A receive given the call's PullBytesLease hands out at most the
bytes it grants (at least one message; rmq.broker_server.processors.pull_response_budget), held until the
call ends."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from rmq import message_format as mf
from rmq import retry
from rmq.broker_server.errors import BrokerError, IllegalInvisibleTime, InvalidReceiptHandle, illegal_argument
from rmq.broker_server.long_polling.fair_shares import FairShares, ShareExceeded
from rmq.broker_server.long_polling.pull_request_hold_service import PullRequestHoldService
from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager, OffsetKey
from rmq.broker_server.processors.consumer_send_msg_back import ConsumerSendMsgBackProcessor, SendBackTarget
from rmq.broker_server.processors.names import check_group_name
from rmq.broker_server.processors.pop_state import InFlight, PopQueue, PopStateTable
from rmq.broker_server.processors.pull_message_processor import (
    PullMessageProcessor,
    PullQuery,
    Sql92RecordFilter,
    sql92_record_filter,
)
from rmq.broker_server.processors.pull_response_budget import PullBytesLease
from rmq.broker_server.processors.receipt_handle import ReceiptHandle, ReceiptHandleCodec
from rmq.broker_server.processors.remembered_receives import RememberedReceives
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.security.caller import account_key
from rmq.sql92 import Sql92Error
from rmq.statuses import GetMessageStatus
from rmq.stored_message import StoredMessage, decode_record
from rmq.subscription import SEPARATOR, tag_codes
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)
MAX_BATCH = 32            # messages one receive hands out (proxy maxBatchSize-like cap)
MAX_HELD_RECEIVES = 10_000     # receives one broker holds at once (long polling), shared fairly by accounts
RENEW_INTERVAL_S = 5.0          # how often auto-renewed deliveries are looked at
RENEW_AHEAD_MS = 20_000         # renewed when less invisibility than this is left
MAX_INVISIBLE_MS = 12 * 3600 * 1000    # proxy maxInvisibleTimeMills
DEFAULT_INVISIBLE_MS = 60_000          # auto-renewed (push) receives: proxy defaultInvisibleTimeMills
ALL_QUEUES = -1                 # a pop naming a topic, not a queue: every queue of it
_MOVED = frozenset({GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY,
                    GetMessageStatus.NO_MATCHED_MESSAGE, GetMessageStatus.MESSAGE_WAS_REMOVING})


def _bytes_left(max_bytes: int | None, records: list[_Record]) -> int | None:
    """What `max_bytes` leaves after `records` (0 when reached; None: unbounded)."""
    if max_bytes is None:
        return None
    return max(max_bytes - sum(len(r.raw) for r in records), 0)


@dataclass(frozen=True)
class GroupPolicy:
    """How the broker treats pop consumer groups (RocketMQ SubscriptionGroupConfig), their
    receives and their filters (enable_property_filter: SQL92 allowed)."""

    max_attempts: int
    fifo_groups: frozenset[str]
    min_invisible_ms: int            # a receive's shortest invisibility (setting min_invisible_ms)
    sql92_enabled: bool = True

    def fifo(self, group: str) -> bool:
        return group in self.fifo_groups


@dataclass(frozen=True)
class PopMessageHeader:
    """One pop as a protocol asks for it (RocketMQ PopMessageRequestHeader)."""

    group: str
    topic: str
    queue_id: int                # ALL_QUEUES: every queue of the topic (a FIFO group may name one)
    expression: str              # the filter: tags ("a || b"; "" or "*": every message), or SQL92
    sql92: bool
    batch_size: int              # clamped to 1..MAX_BATCH
    invisible_ms: int | None     # None: DEFAULT_INVISIBLE_MS
    wait_s: float                # long polling: how long to hold the pop for a message
    attempt_id: str = ""         # a retried pop with the same id gets the first one's deliveries again
    renew_for: str = ""          # a client id: its deliveries stay invisible while it is connected


@dataclass(frozen=True)
class PopRequest:
    group: str
    topic: str
    queue_ids: list[int]
    tags: frozenset[str] | None      # None: every message
    tag_codes: frozenset[int] | None
    batch_size: int
    invisible_ms: int
    fifo: bool
    max_attempts: int
    record_filter: Sql92RecordFilter | None = None   # SQL92 (evaluated on each record's properties)
    max_bytes: int | None = None     # record bytes one receive hands out (at least one message)


@dataclass(frozen=True)
class Popped:
    message: StoredMessage
    handle: ReceiptHandle
    attempts: int
    invisible_ms: int
    size: int          # of the stored record
    receipt_handle: str   # the handle's text, for the group's consumer


@dataclass(frozen=True)
class _Record:
    offset: int
    raw: bytes
    message: StoredMessage


def _query(queue: PopQueue, offset: int, count: int, max_bytes: int = 0,
           tag_codes: frozenset[int] | None = None,
           record_filter: Sql92RecordFilter | None = None) -> PullQuery:
    """A read of `count` messages of `queue` from `offset` (max_bytes 0: the store's bound)."""
    return PullQuery(queue.group, queue.topic, queue.queue_id, offset, count, max_bytes, tag_codes,
                     suspend=False, suspend_timeout_ms=0, record_filter=record_filter)


class PopMessageProcessor:
    def __init__(self, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 hold_service: PullRequestHoldService, table: PopStateTable,
                 remembered: RememberedReceives[Popped], reader: PullMessageProcessor,
                 send_back: ConsumerSendMsgBackProcessor, handles: ReceiptHandleCodec, policy: GroupPolicy,
                 clock: Callable[[], float]) -> None:
        """`reader`: the broker's pull processor, which every read of a queue goes through;
        `send_back`: the send-back processor, which moves a message to its group's DLQ; `handles`:
        the receipt handles' codec; `clock`: the wall clock (seconds) invisibilities are measured
        against."""
        self.topics = topics
        self.handles = handles
        self.policy = policy
        self.reader = reader
        self.send_back = send_back
        self.offsets = offsets
        self.hold_service = hold_service
        self.table = table
        self._locks: dict[PopQueue, asyncio.Lock] = {}
        self._waiters: dict[tuple[str, str], set[asyncio.Future[bool | None]]] = {}
        self._rotation = itertools.count()
        self._stopped = False
        # receives held, by account
        self._held: FairShares[asyncio.Future[bool | None]] = FairShares(MAX_HELD_RECEIVES)
        self._attempts = remembered
        # auto-renewed deliveries (proxy ReceiptHandleProcessor): (queue, offset) -> (client, handle version)
        self._leases: dict[tuple[PopQueue, int], tuple[str, int]] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._clock = clock

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def load(self) -> None:
        """Replay the pop state's journal; the groups' consumer offsets follow it (the journal is
        fsynced, the offsets file written periodically)."""
        self.table.load()
        for queue, state in self.table.queues.items():
            self.offsets.commit_offset(queue.group, queue.topic, queue.queue_id, state.consumer_offset())

    def start(self, client_alive: Callable[[str], bool]) -> None:
        """Renew auto-renewed deliveries by DEFAULT_INVISIBLE_MS while their client is connected."""
        loop = asyncio.get_running_loop()
        self._renewer = loop.create_task(self._renew_forever(client_alive, DEFAULT_INVISIBLE_MS))

    def shutdown(self) -> None:
        """Answer every held receive now and hold no new one."""
        self._stopped = True
        if self._renewer is not None:
            self._renewer.cancel()
        for key in list(self._waiters):
            self._notify(*key)

    # -- pop -----------------------------------------------------------------------------
    async def pop(self, header: PopMessageHeader, lease: PullBytesLease | None = None) -> list[Popped]:
        """The deliveries of one pop (none when nothing came within `header.wait_s`); `lease`:
        the call's share of the pull budget (max_inflight_pull_bytes)."""
        request = self._request(header)
        popped = await self.receive(request, header.wait_s, header.attempt_id, lease)
        if header.renew_for and popped:
            self.lease(request.group, header.renew_for, popped)
        return popped

    def _request(self, header: PopMessageHeader) -> PopRequest:
        check_group_name(header.group)
        config = self.topics.require(header.topic)
        if not config.readable:
            raise BrokerError(rmq_pb2.NO_PERMISSION,
                              f"the topic[{config.topic_name}] pulling message is forbidden")
        invisible_ms = DEFAULT_INVISIBLE_MS if header.invisible_ms is None else header.invisible_ms
        shortest = self.policy.min_invisible_ms
        if header.invisible_ms is not None and not shortest <= invisible_ms <= MAX_INVISIBLE_MS:
            raise IllegalInvisibleTime(f"invisible duration {invisible_ms} ms is outside {shortest}.."
                                       f"{MAX_INVISIBLE_MS} ms")
        tags, codes, record_filter = self._filter(header)
        fifo = self.policy.fifo(header.group)
        if fifo and header.queue_id != ALL_QUEUES:
            if not 0 <= header.queue_id < config.read_queue_nums:
                raise illegal_argument(f"queue {header.queue_id} is out of range for {config.topic_name}")
            queue_ids = [header.queue_id]
        else:
            queue_ids = list(range(config.read_queue_nums))
        batch = min(max(header.batch_size, 1), MAX_BATCH)
        max_bytes = self.reader.limits.max_bytes    # max_pull_bytes, as a pull
        return PopRequest(header.group, config.topic_name, queue_ids, tags, codes, batch, invisible_ms, fifo,
                          self.policy.max_attempts, record_filter, max_bytes)

    def _filter(self, header: PopMessageHeader
                ) -> tuple[frozenset[str] | None, frozenset[int] | None, Sql92RecordFilter | None]:
        """(tags, their hash codes, SQL92 record filter) of the pop's filter expression."""
        expression = header.expression
        if header.sql92:
            if not self.policy.sql92_enabled:
                raise BrokerError(rmq_pb2.FILTER_NOT_SUPPORTED,
                                  "this broker does not filter by SQL92 (enable_property_filter is off)")
            try:
                return None, None, sql92_record_filter(expression)
            except Sql92Error as error:
                raise BrokerError(rmq_pb2.SUBSCRIPTION_PARSE_FAILED, str(error)) from None
        codes = tag_codes(expression)
        if codes is None:
            return None, None, None
        return frozenset(t.strip() for t in expression.split(SEPARATOR) if t.strip()), codes, None

    async def receive(self, request: PopRequest, wait_s: float, attempt_id: str = "",
                      lease: PullBytesLease | None = None) -> list[Popped]:
        """Pop up to a batch, holding up to `wait_s` for one. A receive retried with the same
        `attempt_id` (the push consumer's, after a failed call) gets the deliveries of the first
        one again while they are still in flight, instead of leaving them invisible. `lease`:
        the call's; each pop reads at most the bytes it grants."""
        request = self._group_settings(request)
        remembered = (request.group, request.topic, attempt_id)
        if attempt_id:
            again = [p for p in self._attempts.get(remembered) if self.in_flight(request.group, p.handle)]
            if again:
                return again
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(wait_s, 0.0)
        displaced = False
        while True:
            popped = await self._pop_leased(request, lease)
            if popped or self._stopped or displaced or loop.time() >= deadline:
                break
            displaced = await self._wait(request, deadline - loop.time())
        if attempt_id and popped:
            self._attempts.put(remembered, popped)
        return popped

    def _group_settings(self, request: PopRequest) -> PopRequest:
        """The admin's settings of the group (SubscriptionGroupConfig) apply: a disabled group is
        refused NO_PERMISSION, a stored retry_max_times sets the deliveries before the DLQ."""
        groups = self.reader.groups
        if groups is None:
            return request
        groups.check_consume_enabled(request.group)
        most = groups.max_attempts(request.group, request.max_attempts)
        return request if most == request.max_attempts else replace(request, max_attempts=most)

    async def _pop_leased(self, request: PopRequest, lease: PullBytesLease | None) -> list[Popped]:
        if lease is None or request.max_bytes is None:
            return await self.pop_once(request)
        granted = await lease.grant(request.max_bytes)
        popped: list[Popped] = []
        try:
            popped = await self.pop_once(replace(request, max_bytes=granted))
        finally:
            lease.settle(granted, sum(p.size for p in popped))
        return popped

    async def pop_once(self, request: PopRequest) -> list[Popped]:
        """Up to a batch, and up to the request's max_bytes of records (one message past it at most)."""
        start = next(self._rotation)
        queue_ids = request.queue_ids
        popped: list[Popped] = []
        bytes_left = request.max_bytes
        for index in range(len(queue_ids)):
            room = request.batch_size - len(popped)
            if room <= 0 or (bytes_left is not None and bytes_left <= 0):
                break
            queue = PopQueue(request.group, request.topic, queue_ids[(start + index) % len(queue_ids)])
            from_queue = await self._pop_queue(queue, request, room, bytes_left)
            popped += from_queue
            if bytes_left is not None:
                bytes_left -= sum(p.size for p in from_queue)
        await self.table.sync()   # deliveries, skipped offsets and DLQ moves are durable first
        if popped:    # the group's gets, as a pull's (the console's consume TPS, /metrics)
            self.reader.stats.record_get(request.topic, len(popped), sum(p.size for p in popped),
                                         request.group, account_key())
        return popped

    async def _pop_queue(self, queue: PopQueue, request: PopRequest, room: int,
                         max_bytes: int | None) -> list[Popped]:
        """Up to `room` messages of `queue`: due redeliveries first, then new ones; with
        `max_bytes`, no read once they are reached (the first read always happens)."""
        if queue not in self.table.queues:   # a new pop state, lock and consumer offset: bounded as commits
            key = OffsetKey(queue.group, queue.topic, queue.queue_id)
            initial = await self._initial_offset(queue)
            self.offsets.commit_client_offsets(account_key(), {key: initial}, increase_only=True)
        lock = self._locks.setdefault(queue, asyncio.Lock())
        async with lock:
            if queue not in self.table.queues:
                self.table.state(queue).pop_offset = await self._initial_offset(queue)
            state = self.table.state(queue)
            now = self._now_ms()
            due = sorted(o for o, e in state.inflight.items() if e.visible_at_ms <= now)
            if request.fifo and len(due) < len(state.inflight):
                return []   # an earlier message of this queue is still being consumed
            records: list[_Record] = []
            attempts: list[int] = []
            for offset in due[:room]:
                if _bytes_left(max_bytes, records) == 0:
                    break
                record = await self._read_one(queue, offset)
                entry = state.inflight.get(offset)
                if entry is None:   # acknowledged meanwhile (a late ack of its previous delivery)
                    continue
                if record is None:
                    self.table.acked(queue, [offset])   # gone (retention): nothing to redeliver
                elif not request.fifo and entry.attempts >= request.max_attempts:
                    await self._to_dlq(queue, record, request.max_attempts)
                else:
                    records.append(record)
                    attempts.append(entry.attempts + 1)
            next_offset = state.pop_offset
            bytes_left = _bytes_left(max_bytes, records)
            if not (request.fifo and state.inflight) and len(records) < room and bytes_left != 0:
                fresh, next_offset = await self._read_new(queue, request, state.pop_offset,
                                                          room - len(records), bytes_left)
                records += fresh
                attempts += [1] * len(fresh)
            if not records and next_offset == state.pop_offset:
                return []
            entries = self.table.popped(queue, next_offset, [r.offset for r in records], attempts,
                                        now + request.invisible_ms)
            self._commit(queue)
        handles = [ReceiptHandle(queue.topic, queue.queue_id, r.offset, e.version) for r, e in zip(
            records, entries, strict=True)]
        return [
            Popped(r.message, handle, e.attempts, request.invisible_ms, len(r.raw),
                   self.handles.encode(queue.group, handle))
            for r, e, handle in zip(records, entries, handles, strict=True)
        ]

    async def _initial_offset(self, queue: PopQueue) -> int:
        """A group new to the queue starts at its committed offset (shared with rmq.v1), else at
        the queue's first message (RocketMQ initPopOffsetByCheckMsgInMem for a fresh queue)."""
        committed = self.offsets.query_offset(queue.group, queue.topic, queue.queue_id)
        if committed is not None and committed >= 0:
            return committed
        return await self.reader.first_offset(queue.topic, queue.queue_id)

    async def _read_one(self, queue: PopQueue, offset: int) -> _Record | None:
        result = await self.reader.read(_query(queue, offset, 1))
        if not result.message_count:
            return None
        raw = bytes(result.buffer[: int(result.sizes[0])])
        message = decode_record(raw)
        return _Record(message.queue_offset, raw, message) if message.queue_offset == offset else None

    async def _read_new(self, queue: PopQueue, request: PopRequest, offset: int,
                        room: int, max_bytes: int | None) -> tuple[list[_Record], int]:
        """Up to `room` matching messages from `offset` (up to `max_bytes`, at least one; None:
        the store's max_transfer_bytes), and the offset after what was read."""
        result = await self.reader.read(_query(queue, offset, room, max_bytes or 0, request.tag_codes,
                                               request.record_filter))
        if not result.message_count:
            return [], result.next_begin_offset if result.status in _MOVED else offset
        records, position = [], 0
        for size in result.sizes.tolist():
            raw = bytes(result.buffer[position: position + size])
            position += size
            message = decode_record(raw)
            # the store filters by tag hash code; the tag string decides (hash collisions)
            if request.tags is None or message.properties.get(mf.PROPERTY_TAGS) in request.tags:
                records.append(_Record(message.queue_offset, raw, message))
        return records, result.next_begin_offset

    async def _to_dlq(self, queue: PopQueue, record: _Record, max_attempts: int) -> None:
        """A message delivered max_attempts times: a copy in `%DLQ%<group>`, the original done."""
        target = SendBackTarget(retry.dlq_topic(queue.group), 0)
        await self.send_back.store_copy(queue.group, record.message, target, max_attempts - 1)
        self.table.acked(queue, [record.offset])

    def _commit(self, queue: PopQueue) -> None:
        """The group's consumer offset follows its pop state (`rmq group progress` shows the lag)."""
        state = self.table.queues.get(queue)
        if state is not None:
            self.offsets.commit_offset(queue.group, queue.topic, queue.queue_id, state.consumer_offset())

    async def _wait(self, request: PopRequest, timeout_s: float) -> bool:
        """Hold until something may be receivable (see the module docstring) or `timeout_s`.
        Held receives are shared fairly between accounts (fair_shares): True when another
        account's receive took this one's place (it is then answered, as at its timeout)."""
        if timeout_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        account = account_key()
        changed = loop.create_future()    # result True: displaced; None: something changed
        try:
            displaced = self._held.admit(account, changed)
        except ShareExceeded:
            raise BrokerError(rmq_pb2.LIMIT_EXCEEDED,
                              f"this broker already holds {MAX_HELD_RECEIVES} receives") from None
        if displaced is not None and not displaced.done():
            displaced.set_result(True)
        key = (request.group, request.topic)
        self._waiters.setdefault(key, set()).add(changed)
        states = [self.table.queues.get(PopQueue(request.group, request.topic, q)) for q in request.queue_ids]
        wake_at = [e.visible_at_ms for state in states if state for e in state.inflight.values()]
        if wake_at:
            timeout_s = min(timeout_s, max(min(wake_at) - self._now_ms(), 0) / 1000 + 0.01)
        # a FIFO queue with a message in flight is woken by its ack / change / visibility, not arrivals
        holds = [
            loop.create_task(self.hold_service.suspend(
                request.topic, q, state.pop_offset if state else 0, request.tag_codes, int(timeout_s * 1000)))
            for q, state in zip(request.queue_ids, states, strict=True)
            if not (request.fifo and state and state.inflight)
        ]
        try:
            await asyncio.wait([changed, *holds], timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
            for task in holds:   # a hold refused (HoldTableFull) ends the receive, not a busy loop
                refused = task.exception() if task.done() and not task.cancelled() else None
                if refused is not None:
                    raise refused
        finally:
            self._held.remove(account, changed)
            for task in holds:
                task.cancel()
            await asyncio.gather(*holds, return_exceptions=True)
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(changed)
                if not waiters:
                    del self._waiters[key]
        return changed.done() and changed.result() is True

    def _notify(self, group: str, topic: str) -> None:
        for future in self._waiters.pop((group, topic), set()):
            if not future.done():
                future.set_result(None)

    # -- auto-renewal (ReceiveMessage auto_renew: the push consumers) ------------------------
    def lease(self, group: str, client_id: str, popped: list[Popped]) -> None:
        """Keep `popped` invisible while `client_id` stays connected (until acked or changed)."""
        for item in popped:
            queue = PopQueue(group, item.handle.topic, item.handle.queue_id)
            self._leases[(queue, item.handle.offset)] = (client_id, item.handle.version)

    def _current_leases(self, client_id: str | None = None) -> list[tuple[PopQueue, int, str]]:
        """Leases whose delivery is still the one leased (of `client_id`, or all); others dropped."""
        current = []
        for (queue, offset), (client, version) in list(self._leases.items()):
            state = self.table.queues.get(queue)
            entry = state.inflight.get(offset) if state else None
            if entry is None or entry.version != version:
                del self._leases[(queue, offset)]
            elif client_id is None or client == client_id:
                current.append((queue, offset, client))
        return current

    async def renew_due(self, client_alive: Callable[[str], bool], invisible_ms: int) -> None:
        now = self._now_ms()
        for queue, offset, client in self._current_leases():
            if not client_alive(client):   # gone without saying so: its deliveries run out
                del self._leases[(queue, offset)]
            elif self.table.queues[queue].inflight[offset].visible_at_ms - now < RENEW_AHEAD_MS:
                self.table.renewed(queue, offset, now + invisible_ms)
        await self.table.sync()

    async def release(self, client_id: str) -> None:
        """The client terminated: what it held is receivable again at once."""
        now = self._now_ms()
        released = self._current_leases(client_id)
        for queue, offset, _ in released:
            self.table.renewed(queue, offset, now)
            del self._leases[(queue, offset)]
        await self.table.sync()
        for queue in {queue for queue, _, _ in released}:
            self._notify(queue.group, queue.topic)

    async def _renew_forever(self, client_alive: Callable[[str], bool], invisible_ms: int) -> None:
        while True:
            await asyncio.sleep(RENEW_INTERVAL_S)
            try:
                await self.renew_due(client_alive, invisible_ms)
            except Exception:
                log.exception("renewing auto-renewed deliveries failed")

    # -- ack / change / forward (AckMessageProcessor, ChangeInvisibleTimeProcessor) ----------
    def current_handle(self, text: str, group: str, topic: str) -> ReceiptHandle:
        """The handle in `text`, unless the message was delivered again since (a stale handle
        must not end the delivery another consumer now holds)."""
        handle = self.handles.decode(text, group, topic)
        if self.superseded(group, handle):
            raise InvalidReceiptHandle("the receipt handle is superseded: the message was delivered again")
        return handle

    def check_in_flight(self, group: str, handle: ReceiptHandle) -> None:
        """Refuse a handle that no longer names the delivery in flight (acknowledged, or
        delivered again since)."""
        if self.in_flight(group, handle) is None:
            raise InvalidReceiptHandle("the receipt handle is stale: the message was acknowledged or "
                                       "delivered again")

    def in_flight(self, group: str, handle: ReceiptHandle) -> InFlight | None:
        """The delivery `handle` names, if it is still the current one."""
        state = self.table.queues.get(PopQueue(group, handle.topic, handle.queue_id))
        entry = state.inflight.get(handle.offset) if state else None
        return entry if entry is not None and entry.version == handle.version else None

    def superseded(self, group: str, handle: ReceiptHandle) -> bool:
        """Whether a later delivery of the handle's message is in flight (the handle is stale)."""
        state = self.table.queues.get(PopQueue(group, handle.topic, handle.queue_id))
        entry = state.inflight.get(handle.offset) if state else None
        return entry is not None and entry.version != handle.version

    async def ack(self, group: str, handles: list[ReceiptHandle]) -> None:
        """Acknowledge (an already acknowledged message is fine: acks are idempotent); the
        caller has refused superseded handles (`superseded`)."""
        by_queue: dict[PopQueue, list[int]] = {}
        for handle in handles:
            by_queue.setdefault(PopQueue(group, handle.topic, handle.queue_id), []).append(handle.offset)
        for queue, offsets in by_queue.items():
            self.table.acked(queue, offsets)
            self._commit(queue)
        await self.table.sync()
        for queue in by_queue:
            self._notify(queue.group, queue.topic)

    async def change_invisible(self, group: str, handle: ReceiptHandle, invisible_ms: int) -> ReceiptHandle:
        queue = PopQueue(group, handle.topic, handle.queue_id)
        entry = self.table.changed(queue, handle.offset, self._now_ms() + invisible_ms)
        await self.table.sync()
        self._notify(group, handle.topic)
        return ReceiptHandle(handle.topic, handle.queue_id, handle.offset, entry.version)

    async def forward_to_dlq(self, group: str, handle: ReceiptHandle, max_attempts: int) -> None:
        queue = PopQueue(group, handle.topic, handle.queue_id)
        record = await self._read_one(queue, handle.offset)
        if record is None:
            self.table.acked(queue, [handle.offset])
        else:
            await self._to_dlq(queue, record, max_attempts)
        self._commit(queue)
        await self.table.sync()
        self._notify(group, handle.topic)
