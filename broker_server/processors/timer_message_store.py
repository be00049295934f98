"""TimerMessageStore (RocketMQ 5 TimerMessageStore; docs/internals/timer.md): messages whose
properties carry TIMER_DELIVER_MS, TIMER_DELAY_SEC or TIMER_DELAY_MS, on any protocol, wait until
that time and are then stored again in their real topic and queue.

A send parks such a message in queue 0 of `rmq_sys_wheel_timer` in the CommitLog (so it is
durable and replicated like any record), with REAL_TOPIC / REAL_QID and the normalised
TIMER_DELIVER_MS (`park`, called from each protocol's send path). One task then
- enqueues: reads the timer queue from the checkpoint's offset and chains each message into
  the TimerWheel slot of its delivery second through the TimerLog (store/timer_log.py,
  store/timer_wheel.py), memory staying flat however many wait;
- dequeues (master): once a slot's second has passed, reads its chain, stores each pending
  message into its real queue marked TIMER_QUEUE_OFFSET, and moves the read time on;
- settles (slave): marks delivered what the master reports delivered (SlaveSynchronize), so a
  slave that becomes master delivers exactly what is left.
A message whose delivery may have been stored before a crash (DELIVERING) or by the former
master is looked up in the index (its UNIQ_KEY in the real topic, with its TIMER_QUEUE_OFFSET)
before it is delivered, so none is delivered twice. Recall marks a pending entry RECALLED, after
a recall record is stored in the timer queue (replicated; re-applied on recovery)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import logging
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rmq import message_format as mf
from rmq.broker_server.background_tasks import cancel_all, wait_for_event
from rmq.broker_server.errors import BrokerError, NotMaster
from rmq.broker_server.json_file import read_json
from rmq.broker_server.metrics.collectors import TimerFigures
from rmq.broker_server.processors.names import SYSTEM_TOPIC_PREFIX, TIMER_TOPIC
from rmq.broker_server.processors.put_status import check_put_results
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.security import caller
from rmq.statuses import GetMessageStatus
from rmq.store import MessageStore, MessageToStore
from rmq.store.mapped_file_queue import KEEP_NOTHING
from rmq.store.timer_checkpoint import TimerCheckpoint
from rmq.store.timer_log import NO_ENTRY, EntryState, TimerEntry, TimerLog
from rmq.store.timer_wheel import Slot, TimerWheel
from rmq.stored_message import StoredMessage, decode_record, decode_records
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)
TIMER_GROUP = SYSTEM_TOPIC_PREFIX + "timer"
PROPERTY_TIMER_DELIVER_MS = mf.PROPERTY_TIMER_DELIVER_MS
PROPERTY_TIMER_DELAY_SEC = mf.PROPERTY_TIMER_DELAY_SEC
PROPERTY_TIMER_DELAY_MS = mf.PROPERTY_TIMER_DELAY_MS
TIMER_PROPERTIES = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS)
PROPERTY_TIMER_QUEUE_OFFSET = "TIMER_QUEUE_OFFSET"   # rmq's: the delivered copy's timer-queue offset
PROPERTY_TIMER_PRODUCER = "TIMER_PRODUCER"           # rmq's: the sending account (recall, shares)
PROPERTY_TIMER_RECALL = "TIMER_RECALL_OFFSET"        # rmq's: a recall record's target offset
ENQUEUE_BATCH = 1024
RESERVE_AHEAD = 1024   # TimerLog entries reserved past those admitted (recall records among them)
DELIVER_BATCH = 256
RETRY_AFTER_FAILURE_S = 1.0
CHECKPOINT_INTERVAL_S = 1.0
CLEAN_INTERVAL_S = 60.0
MAX_DIGITS = 19
FORMER_PROGRESS_FILE = "timerOffset.json"   # the in-memory heap's: the first offset not delivered
_LIVE = frozenset({EntryState.PENDING, EntryState.DELIVERING})
_MOVED = frozenset({GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY})


@dataclass(frozen=True)
class TimerSettings:
    precision_ms: int = 1000
    max_delay_ms: int = 3 * 86_400_000
    max_pending: int = 10_000_000
    max_pending_per_account: int = 2_000_000


def has_timer(properties: Mapping[str, str]) -> bool:
    """Whether a message's properties name a delivery time (`park` may send it to the timer queue)."""
    return not properties.keys().isdisjoint(TIMER_PROPERTIES)


def timer_illegal(message: str) -> BrokerError:
    return BrokerError(rmq_pb2.WHEEL_TIMER_MSG_ILLEGAL, message)


def deliver_time_ms(properties: dict[str, str], now_ms: int, settings: TimerSettings) -> int | None:
    """The delivery time a message's timer property asks for (None: not a timer message).
    Raises WHEEL_TIMER_MSG_ILLEGAL naming the property for a bad or too distant value."""
    present = [name for name in TIMER_PROPERTIES if name in properties]
    if not present:
        return None
    if len(present) > 1:
        raise timer_illegal(f"properties {', '.join(present)} are given together: a timer message "
                            "carries one of them")
    name, value = present[0], properties[present[0]]
    if not (value.isascii() and value.isdigit()) or len(value) > MAX_DIGITS:
        raise timer_illegal(f"property {name} must be a non-negative whole number "
                            f"({'epoch ms' if name == PROPERTY_TIMER_DELIVER_MS else 'a delay'}), "
                            f"not {value[:40]!r}")
    number = int(value)
    deliver_ms = {PROPERTY_TIMER_DELIVER_MS: number, PROPERTY_TIMER_DELAY_SEC: now_ms + number * 1000,
                  PROPERTY_TIMER_DELAY_MS: now_ms + number}[name]
    if deliver_ms - now_ms > settings.max_delay_ms:
        raise timer_illegal(f"property {name}={value} asks for delivery {deliver_ms - now_ms} ms from now; "
                            f"the maximum is timer_max_delay_s={settings.max_delay_ms // 1000}")
    return deliver_ms


def name_code(name: str) -> int:
    """A TimerLog entry's code of its producer account and of its real topic: CRC32 of the name."""
    return zlib.crc32(name.encode())


class RecallHandles:
    """Recall handles: `base64url(topic, broker, offset, deliver ms, producer, mac)` (lines), the
    mac an HMAC-SHA256 under the broker's handle secret, so an altered handle is refused; the
    broker's name routes a recall (RocketMQ's RecallMessageHandle names it too)."""

    def __init__(self, secret: bytes, broker_name: str) -> None:
        self._secret = secret
        self.broker_name = broker_name

    @classmethod
    def of_group(cls, cluster_secret: bytes, broker_name: str) -> RecallHandles:
        """Handles every member of a broker group signs and honours alike: the key derived from
        the group's cluster secret, so a slave promoted by a failover recalls by the handles its
        former master gave out."""
        purpose = b"rmq recall handles\n" + broker_name.encode()
        return cls(hmac.new(cluster_secret, purpose, hashlib.sha256).digest(), broker_name)

    def _mac(self, fields: list[str]) -> str:
        return hmac.new(self._secret, "\n".join(fields).encode(), hashlib.sha256).hexdigest()[:32]

    def encode(self, topic: str, offset: int, deliver_ms: int, producer: str) -> str:
        fields = [topic, self.broker_name, str(offset), str(deliver_ms), producer]
        return base64.urlsafe_b64encode("\n".join([*fields, self._mac(fields)]).encode()).decode()

    def decode(self, handle: str) -> tuple[str, int, int, str]:
        """(topic, timer-queue offset, deliver ms, producer). Raises ILLEGAL_ARGUMENT."""
        try:
            fields = base64.urlsafe_b64decode(handle.encode()).decode().split("\n")
            topic, _broker, offset, deliver_ms, producer, mac = fields
            valid = hmac.compare_digest(mac, self._mac(fields[:5]))
            parsed = (topic, int(offset), int(deliver_ms), producer)
        except (ValueError, binascii.Error, UnicodeError):
            valid = False
        if not valid:
            raise BrokerError(rmq_pb2.ILLEGAL_ARGUMENT,
                              "recall handle is not valid: altered, or not issued by this broker")
        return parsed


class TimerMessageStore:
    def __init__(self, store: MessageStore, topics: TopicConfigManager, executor: StoreExecutor,
                 store_path: Path, settings: TimerSettings, handles: RecallHandles,
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.topics = topics
        self.executor = executor
        self.settings = settings
        self.handles = handles
        self.clock = clock
        self.checkpoint_path = store_path / "config" / "timerCheck.json"
        self.timer_log = TimerLog(store_path / "timerlog")
        self.wheel = TimerWheel(store_path / "timerwheel", settings.precision_ms, settings.max_delay_ms)
        self.checkpoint = TimerCheckpoint()
        self.pending = 0
        self.pending_by_account: Counter[int] = Counter()
        self.pending_by_topic: Counter[int] = Counter()   # by topic_code of the real topic
        self._admitted: Counter[int] = Counter()   # per account: admitted by a send, not chained yet
        self._floor = KEEP_NOTHING
        self._chained_until = 0   # CommitLog end of the last timer-queue record chained
        self.last_lateness_ms = 0
        self.delivered = 0
        self._verify_until = 0     # slots before this time: look in the index before delivering
        self._master_progress: tuple[int, int] = (0, 0)   # slave: master's (read time, CommitLog end)
        self._wake = asyncio.Event()
        # one round of enqueue + dequeue at a time: a record chained into the slot being delivered
        # while its delivery is stored would be passed over
        self._round = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self.is_master = True

    # -- start and stop ----------------------------------------------------------------------
    def load(self, is_master: bool) -> None:
        """Read the checkpoint and count what is pending (one vector scan of the TimerLog)."""
        self.is_master = is_master
        self.checkpoint = TimerCheckpoint.load(self.checkpoint_path)
        if not self.checkpoint_path.exists():   # a store of the former heap (third release)
            former = read_json(self.checkpoint_path.with_name(FORMER_PROGRESS_FILE)) or {}
            self.checkpoint.enqueue_offset = int(former.get("committedOffset", 0))
        pending = self.timer_log.pending()
        self.pending = len(pending.indexes)
        self.pending_by_account = Counter(pending.accounts.tolist())
        self.pending_by_topic = Counter(pending.topics.tolist())
        self._floor = pending.commit_log_floor(KEEP_NOTHING)
        self.store.retention_floor = self.retention_floor
        if self.wheel.fresh and self.pending:
            self._rechain(pending.indexes.tolist())
        if is_master and self.checkpoint.slave:   # deliveries the former master made are in the index
            self._verify_until = self._now_ms()

    def _rechain(self, indexes: list[int]) -> None:
        """A new wheel (its geometry changed): chain every pending entry into it again."""
        for index in indexes:
            entry = self.timer_log.read(index)
            if entry is not None:
                self._link(entry, self._slot_of(entry.deliver_ms), force=True)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._tasks = [self._loop.create_task(self._run())]

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        self._save_checkpoint()
        self.timer_log.close()
        self.wheel.close()

    def on_dispatch(self) -> None:
        """Store dispatch thread: a record entered the timer queue (TIMER_TOPIC; the broker calls
        this for that topic only)."""
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._wake.set)
            except RuntimeError:   # loop closed during shutdown
                pass

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- the send path -----------------------------------------------------------------------
    def park(self, properties: dict[str, str], topic: str, queue_id: int) -> tuple[str, int]:
        """The (topic, queue) a message is stored in: its own, or the timer queue when its timer
        property asks for a later time (properties rewritten: TIMER_DELIVER_MS, REAL_TOPIC,
        REAL_QID, UNIQ_KEY, TIMER_PRODUCER). Raises WHEEL_TIMER_MSG_ILLEGAL; nothing is changed
        then. The send then `admit`s the request's parked timers against the budgets."""
        if not has_timer(properties):   # not a timer message: no clock read
            return topic, queue_id
        now_ms = self._now_ms()
        deliver_ms = deliver_time_ms(properties, now_ms, self.settings)
        if deliver_ms is None:
            return topic, queue_id
        for name in TIMER_PROPERTIES:
            properties.pop(name, None)
        properties[PROPERTY_TIMER_DELIVER_MS] = str(deliver_ms)
        if deliver_ms <= now_ms:   # due already: stored now (RocketMQ: a time in the past is now)
            return topic, queue_id
        properties[mf.PROPERTY_REAL_TOPIC] = topic
        properties[mf.PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        properties.setdefault(mf.PROPERTY_UNIQ_KEY, uuid.uuid4().hex.upper())
        properties[PROPERTY_TIMER_PRODUCER] = caller.account_key()
        return TIMER_TOPIC, 0

    def admit(self, count: int) -> None:
        """Before a send stores the `count` timers `park` sent to the timer queue (all the caller's):
        refuse WHEEL_TIMER_FLOW_CONTROL past the pending budgets, counting besides what is chained
        the timers admitted and not chained yet (this request's, those of sends under way and those
        stored but not read yet), so neither a batch nor concurrent sends pass a budget; then
        reserve their files. The send calls `release` when they are not stored."""
        producer = caller.account_key()
        account = name_code(producer)
        queue_end = self.store.get_max_offset_in_queue(TIMER_TOPIC, 0)
        unchained = max(queue_end - self.checkpoint.enqueue_offset, 0)
        backlog = self.pending + max(unchained, sum(self._admitted.values()))
        if backlog + count > self.settings.max_pending:
            raise BrokerError(rmq_pb2.WHEEL_TIMER_FLOW_CONTROL,
                              f"{backlog} timer messages are pending and {count} more would exceed "
                              f"timer_max_pending={self.settings.max_pending}: retry later")
        mine = self.pending_by_account[account] + self._admitted[account]
        if mine + count > self.settings.max_pending_per_account:
            raise BrokerError(rmq_pb2.WHEEL_TIMER_FLOW_CONTROL,
                              f"account {producer!r} has {mine} timer messages pending and {count} more "
                              f"would exceed timer_max_pending_per_account="
                              f"{self.settings.max_pending_per_account}: retry later")
        self._reserve_files(count)
        self._admitted[account] += count

    def release(self, count: int) -> None:
        """The `count` timers `admit` counted for the caller were not stored."""
        self._unadmit(name_code(caller.account_key()), count)

    def _unadmit(self, account: int, count: int) -> None:
        left = self._admitted.get(account, 0) - count
        if left > 0:
            self._admitted[account] = left
        else:
            self._admitted.pop(account, None)

    def _reserve_files(self, count: int) -> None:
        """The wheel (at the first timer) and the TimerLog segments the next `count` timers go
        into, created with their blocks reserved: a full disk refuses the send here, before
        anything is stored, instead of faulting a sparse page later (SIGBUS on tmpfs)."""
        first = self.store.get_max_offset_in_queue(TIMER_TOPIC, 0)
        try:
            self.wheel.allocate()
            self.timer_log.reserve(first, first + sum(self._admitted.values()) + count + RESERVE_AHEAD)
        except OSError as error:
            raise BrokerError(rmq_pb2.SERVICE_NOT_AVAILABLE,
                              f"no room on the store's disk for timer messages: {error.strerror} "
                              f"({error.filename or 'timer files'})") from None

    def recall_handle(self, properties: dict[str, str], timer_offset: int) -> str:
        """The handle a producer gets for a message `park` sent to the timer queue."""
        return self.handles.encode(properties[mf.PROPERTY_REAL_TOPIC], timer_offset,
                                   int(properties[PROPERTY_TIMER_DELIVER_MS]),
                                   properties[PROPERTY_TIMER_PRODUCER])

    async def recall(self, topic: str, handle: str) -> str:
        """Cancel a pending timer message by its recall handle (its producer or an admin).
        Returns its message id (UNIQ_KEY), as RocketMQ's RecallMessageResponseHeader names it."""
        if not self.is_master:
            raise NotMaster("this broker is a SLAVE: recall on the master of its broker group")
        handle_topic, offset, deliver_ms, producer = self.handles.decode(handle)
        if topic != handle_topic:   # the ACL checked PUB on `topic`: it must be the message's
            raise BrokerError(rmq_pb2.ILLEGAL_ARGUMENT,
                              f"the recall handle is for topic {handle_topic!r}, not {topic!r}")
        if not caller.owns(producer):
            raise BrokerError(rmq_pb2.NO_PERMISSION,
                              "the recall handle belongs to another account's message")
        entry = self.timer_log.read(offset)
        if entry is None and offset >= self.checkpoint.enqueue_offset:
            async with self._round:
                await self._enqueue()
            entry = self.timer_log.read(offset)
        if entry is None or entry.deliver_ms != deliver_ms or entry.account != name_code(producer):
            raise BrokerError(rmq_pb2.QUERY_NOT_FOUND, "no timer message waits under this recall handle")
        if entry.state is not EntryState.PENDING:
            raise BrokerError(rmq_pb2.QUERY_NOT_FOUND,
                              f"the timer message is already {entry.state.name.lower()}")
        if self._slot_of(deliver_ms) <= self._now_ms() // self.settings.precision_ms + 1:
            raise BrokerError(rmq_pb2.QUERY_NOT_FOUND, "the timer message is due now: too late to recall")
        [message] = await self.executor.run(self._read_records, [entry])
        record = MessageToStore(topic=TIMER_TOPIC, queue_id=0, body=b"recall", properties={
            PROPERTY_TIMER_RECALL: str(offset), mf.PROPERTY_REAL_TOPIC: handle_topic})
        check_put_results(await self.executor.run(self.store.put_messages, [record]))
        self._recalled(offset)
        return "" if message is None else message.properties.get(mf.PROPERTY_UNIQ_KEY, "")

    def _recalled(self, offset: int) -> None:
        entry = self.timer_log.read(offset)
        if entry is not None and entry.state is EntryState.PENDING:
            self.timer_log.set_state(offset, EntryState.RECALLED)
            self._settled(entry)

    def _settled(self, entry: TimerEntry) -> None:
        self.pending -= 1
        for counts, key in ((self.pending_by_account, entry.account), (self.pending_by_topic, entry.topic)):
            counts[key] -= 1
            if counts[key] <= 0:
                del counts[key]

    def pending_of_topic(self, topic: str) -> int:
        """Timer messages waiting here for `topic` (a topic whose name shares its CRC32 with
        another's counts theirs too)."""
        return self.pending_by_topic.get(name_code(topic), 0)

    def figures(self) -> TimerFigures:
        return TimerFigures(self.pending, self.delivered, self.last_lateness_ms)

    # -- slave -------------------------------------------------------------------------------
    def master_progress(self) -> tuple[int, int]:
        """(read time, CommitLog end when it was read): what a slave may settle up to."""
        return self.checkpoint.read_time_ms, self.store.get_commit_log_max_offset()

    def set_master_progress(self, read_time_ms: int, commit_log_end: int) -> None:
        self._master_progress = (read_time_ms, commit_log_end)
        self._wake.set()

    # -- the task ----------------------------------------------------------------------------
    async def _run(self) -> None:
        saved = cleaned = time.monotonic()
        while True:
            self._wake.clear()
            wait = RETRY_AFTER_FAILURE_S
            try:   # a failure (a full disk failing the checkpoint's write among them) is retried
                async with self._round:
                    await self._enqueue()
                    wait = await (self._dequeue() if self.is_master else self._settle())
                if time.monotonic() - saved >= CHECKPOINT_INTERVAL_S:
                    await self.executor.run(self._save_checkpoint)
                    saved = time.monotonic()
                if saved - cleaned >= CLEAN_INTERVAL_S:
                    self.clean()   # on the loop: no read of a segment races its deletion
                    cleaned = saved
            except Exception:
                log.exception("timer messages: a round failed; retrying")
            await wait_for_event(self._wake, min(wait, CHECKPOINT_INTERVAL_S))

    def _save_checkpoint(self) -> None:
        self.checkpoint.slave = not self.is_master
        self.timer_log.flush()
        self.wheel.flush()
        self.checkpoint.save(self.checkpoint_path)

    def _read_slot(self) -> int:
        if not self.checkpoint.read_time_ms:
            precision = self.settings.precision_ms
            self.checkpoint.read_time_ms = self._now_ms() // precision * precision
        return self.checkpoint.read_time_ms // self.settings.precision_ms

    def _slot_of(self, deliver_ms: int) -> int:
        return max(self.wheel.slot_time(deliver_ms), self._read_slot())

    async def _enqueue(self) -> None:
        """Chain the timer queue's new records into the wheel (TimerEnqueueGetService/PutService)."""
        while True:
            offset = self.checkpoint.enqueue_offset
            # by pread: each record is read once here, its pages need not stay in the broker's memory
            result = await self.executor.run(self.store.get_message, TIMER_GROUP, TIMER_TOPIC, 0, offset,
                                             ENQUEUE_BATCH, through_file=True)
            if result.status in _MOVED or (not result.message_count and result.next_begin_offset > offset):
                self.checkpoint.enqueue_offset = result.next_begin_offset
                continue
            if not result.message_count:
                return
            sizes = result.sizes.tolist()
            for message, size in zip(decode_records(bytes(result.buffer), result.sizes), sizes, strict=True):
                self._enqueue_one(message, size)
                self.checkpoint.enqueue_offset = message.queue_offset + 1
                self._chained_until = message.physical_offset + size

    def _enqueue_one(self, message: StoredMessage, size: int) -> None:
        index, properties = message.queue_offset, message.properties
        existing = self.timer_log.read(index)
        if PROPERTY_TIMER_RECALL in properties:
            if existing is None:
                self.timer_log.write(TimerEntry(index, NO_ENTRY, 0, message.physical_offset, size, 0,
                                                EntryState.MARKER))
            self._recalled(int(properties[PROPERTY_TIMER_RECALL]))
            return
        if existing is not None and existing.state is not EntryState.PENDING:
            return   # enqueued and settled before a restart
        deliver_ms = int(properties.get(PROPERTY_TIMER_DELIVER_MS, "0"))
        producer = name_code(properties.get(PROPERTY_TIMER_PRODUCER, ""))
        topic = name_code(properties.get(mf.PROPERTY_REAL_TOPIC, ""))
        entry = existing or TimerEntry(index, NO_ENTRY, deliver_ms, message.physical_offset, size, producer,
                                       EntryState.PENDING, topic)
        if self._link(entry, self._slot_of(deliver_ms), force=False) and existing is None:
            self.pending += 1
            self.pending_by_account[entry.account] += 1
            self.pending_by_topic[entry.topic] += 1
            self._unadmit(entry.account, 1)
            self._floor = min(self._floor, entry.phys)

    def _link(self, entry: TimerEntry, slot_time: int, force: bool) -> bool:
        """Append `entry` to its slot's chain (entry first, then the slot: a crash between leaves
        an entry the slot does not reach, chained again on recovery). False when it is already
        chained (index at or below the slot's last: entries are chained in index order)."""
        slot = self.wheel.get(slot_time)
        if not force and slot.last >= entry.index:
            return False
        self.timer_log.write(TimerEntry(entry.index, slot.last, entry.deliver_ms, entry.phys, entry.size,
                                        entry.account, entry.state, entry.topic))
        self.wheel.put(Slot(slot_time, entry.index if slot.first == NO_ENTRY else slot.first, entry.index,
                            slot.count + 1))
        return True

    def _chain(self, slot: Slot) -> list[TimerEntry]:
        """The slot's entries, oldest delivery time first (then in sending order)."""
        entries, index = [], slot.last
        while index != NO_ENTRY:
            entry = self.timer_log.read(index)
            if entry is None:
                break   # below retention
            entries.append(entry)
            index = entry.prev
        return sorted(entries, key=lambda e: (e.deliver_ms, e.index))

    async def _dequeue(self) -> float:
        """Deliver every slot whose time has passed, in time order (TimerDequeue*Service).
        Returns the seconds until the current slot has passed."""
        precision = self.settings.precision_ms
        slots_walked = 0
        while self._read_slot() < self._now_ms() // precision:
            if not self.pending:
                # nothing pending, so no slot holds a live entry: skip to now instead of reading
                # each passed second's slot (after a long stop, up to the 3 days' worth)
                self.checkpoint.read_time_ms = self._now_ms() // precision * precision
                break
            slot_time = self._read_slot()
            slot = self.wheel.get(slot_time)
            if slot.count:
                live = [e for e in self._chain(slot) if e.state in _LIVE]
                for start in range(0, len(live), DELIVER_BATCH):
                    await self._deliver(live[start:start + DELIVER_BATCH], slot_time)
            self.checkpoint.read_time_ms = (slot_time + 1) * precision
            slots_walked += 1
            if slots_walked % 1024 == 0:
                await asyncio.sleep(0)
        return ((self._read_slot() + 1) * precision - self._now_ms()) / 1000

    async def _deliver(self, entries: list[TimerEntry], slot_time: int) -> None:
        records = await self.executor.run(self._read_records, entries)
        uncertain = slot_time * self.settings.precision_ms < self._verify_until
        batch, sent = [], []
        for entry, record in zip(entries, records, strict=True):
            copy = None if record is None else self._copy_of(entry, record)
            if copy is None or ((uncertain or entry.state is EntryState.DELIVERING)
                                and await self._delivered_before(entry, copy)):
                self.timer_log.set_state(entry.index, EntryState.DELIVERED)
                self._settled(entry)
                continue
            batch.append(copy)
            sent.append(entry)
        if not batch:
            return
        for entry in sent:
            self.timer_log.set_state(entry.index, EntryState.DELIVERING)
        check_put_results(await self.executor.run(self.store.put_messages, batch))
        now_ms = self._now_ms()
        for entry in sent:
            self.timer_log.set_state(entry.index, EntryState.DELIVERED)
            self._settled(entry)
            self.last_lateness_ms = now_ms - entry.deliver_ms
        self.delivered += len(sent)

    def _read_records(self, entries: list[TimerEntry]) -> list[StoredMessage | None]:
        records = []
        for entry in entries:
            raw = self.store.look_message_by_offset(entry.phys)
            records.append(None if raw is None else decode_record(raw))
        return records

    def _copy_of(self, entry: TimerEntry, message: StoredMessage) -> MessageToStore | None:
        """The message as delivered to its real queue; None (dropped) when its topic is gone."""
        properties = dict(message.properties)
        topic = properties.get(mf.PROPERTY_REAL_TOPIC, "")
        if self.topics.get(topic) is None or mf.PROPERTY_REAL_QUEUE_ID not in properties:
            log.warning("dropping timer message at timer offset %d: its topic %r no longer exists",
                        entry.index, topic)
            return None
        properties[PROPERTY_TIMER_QUEUE_OFFSET] = str(entry.index)
        properties.pop(PROPERTY_TIMER_PRODUCER, None)
        queue_id = int(properties[mf.PROPERTY_REAL_QUEUE_ID])
        return MessageToStore.copy_of(message, topic, queue_id, properties, message.reconsume_times)

    async def _delivered_before(self, entry: TimerEntry, copy: MessageToStore) -> bool:
        """Whether the real topic already holds this entry's delivery (found by its UNIQ_KEY)."""
        key = copy.properties.get(mf.PROPERTY_UNIQ_KEY, "")
        if not key:
            return False
        found = await self.executor.run(self.store.query_message_by_key, copy.topic, key, 64,
                                        entry.deliver_ms - 3_600_000, self._now_ms() + 3_600_000)
        if not found.message_count:
            return False
        copies = decode_records(bytes(found.buffer), found.sizes)
        return any(c.properties.get(PROPERTY_TIMER_QUEUE_OFFSET) == str(entry.index) for c in copies)

    async def _settle(self) -> float:
        """Slave: mark delivered the slots the master has delivered, once this slave holds the
        CommitLog up to where the master stood when it said so."""
        read_time_ms, commit_log_end = self._master_progress
        if self.store.get_commit_log_max_offset() < commit_log_end:
            return RETRY_AFTER_FAILURE_S
        precision = self.settings.precision_ms
        while self._read_slot() < read_time_ms // precision:
            slot_time = self._read_slot()
            for entry in self._chain(self.wheel.get(slot_time)):
                if entry.state in _LIVE:
                    self.timer_log.set_state(entry.index, EntryState.DELIVERED)
                    self._settled(entry)
            self.checkpoint.read_time_ms = (slot_time + 1) * precision
            await asyncio.sleep(0)
        return CHECKPOINT_INTERVAL_S

    # -- retention ---------------------------------------------------------------------------
    def clean(self) -> int:
        """Delete TimerLog segments below the oldest entry still pending, and move the CommitLog
        retention floor up to the oldest pending message."""
        pending = self.timer_log.pending()
        self._floor = pending.commit_log_floor(KEEP_NOTHING)
        oldest = int(pending.indexes[0]) if len(pending.indexes) else self.checkpoint.enqueue_offset
        return self.timer_log.delete_below(min(oldest, self.checkpoint.enqueue_offset))

    def retention_floor(self) -> int:
        """Store clean thread: the CommitLog offset age-based retention keeps (docs/internals/
        timer.md §Retention): at most the oldest pending message's offset (lowered as entries are
        chained, raised by `clean` once a minute); the timer queue's records not chained yet lie
        past the last one chained."""
        unchained = self.store.get_max_offset_in_queue(TIMER_TOPIC, 0) > self.checkpoint.enqueue_offset
        return min(self._floor, self._chained_until if unchained else KEEP_NOTHING)
