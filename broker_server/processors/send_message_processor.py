"""SendMessage (RocketMQ SendMessageProcessor): a batch of messages for one topic, validated
whole before anything is written, so a refused batch leaves nothing behind. Messages without
a queue id are spread round-robin over the topic's write queues. A message with a delay level
is stored in SCHEDULE_TOPIC_XXXX queue level-1 with its real topic and queue in properties
(spec consumer-pull-rebalance §19.1, TV-15) until ScheduleMessageService delivers it; its
reported queue offset is -1 because its real offset is assigned on delivery. Under sync
flush an OK answer means the batch is on disk.

A batch of up to 256 messages and 256 KiB of bodies is stored on the event loop when the put
cannot wait (MessageStore.try_put_batch): at most a millisecond or two of work (the GIL would
hold the loop for it on a store thread too) instead of a hop to a store thread and back, each
a GIL hand-off that can wait out the interpreter's switch interval — the send half of a
long-poll wake, and 20-35 % of the broker's CPU per message of a 256 x 100 B send
(bench/NOTES.md). Anything larger, or a put that would wait, goes to the store executor."""

from __future__ import annotations

import asyncio
import functools
import ipaddress
import itertools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from rmq import message_format as mf
from rmq.broker_server.errors import BrokerError, NotMaster, illegal_argument
from rmq.broker_server.metrics.broker_stats import BrokerStatsManager
from rmq.broker_server.processors.delay_levels import delay_level_to_queue_id
from rmq.broker_server.processors.names import SCHEDULE_TOPIC, TIMER_TOPIC
from rmq.broker_server.processors.put_status import STORED_ON_MASTER_ONLY, check_put_results, check_put_status
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.timer_message_store import has_timer
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.store import (
    BrokerRole,
    MessageBatch,
    MessageStore,
    MessageToStore,
    OneRecord,
    PutBatchResult,
    PutMessageResult,
    PutMessageStatus,
)
from rmq.store.message_batch import encode_properties
from rmq.topic_config import TopicConfig
from rmq.v1 import rmq_pb2

if TYPE_CHECKING:
    from rmq.broker_server.processors.timer_message_store import TimerMessageStore

NO_HOST = bytes(8)
INLINE_PUT_MAX_MESSAGES = 256          # a batch at most this large ...
INLINE_PUT_MAX_BODY_BYTES = 256 << 10  # ... and this heavy may be stored on the event loop

@functools.lru_cache(maxsize=4096)   # one parse per connection, not per message
def born_host_from_peer(peer: str) -> bytes:
    """gRPC peer "ipv4:127.0.0.1:54321" -> 4-byte address + 4-byte port (the record's IPv4
    host layout); other peers (IPv6, unix sockets) -> zeros."""
    kind, _, address = peer.partition(":")
    host, _, port = address.rpartition(":")
    if kind != "ipv4" or not port.isdigit():
        return NO_HOST
    try:
        return ipaddress.IPv4Address(host).packed + int(port).to_bytes(4, "big")
    except ValueError:
        return NO_HOST


@dataclass(slots=True)
class OneMessage:
    """One message of a single-message send as every protocol adapter reads it (RocketMQ's
    SendMessageRequestHeader and body): user properties without TAGS, KEYS and DELAY."""

    topic: str
    body: bytes
    tags: str = ""
    keys: str = ""
    properties: Mapping[str, str] = field(default_factory=dict)
    queue_id: int = -1         # -1: the next write queue round-robin
    delay_level: int = 0
    flag: int = 0
    born_timestamp: int = 0    # 0: now


@dataclass(slots=True)
class SendResult:
    """The answer to a single-message send (RocketMQ SendMessageResponseHeader)."""

    code: rmq_pb2.Code   # OK or one of STORED_ON_MASTER_ONLY
    reason: str
    msg_id: str
    queue_id: int
    queue_offset: int   # -1 for a delayed or timer message: its real offset is assigned on delivery
    recall_handle: str = ""   # a timer message's (docs/internals/timer.md §Recall), else ""


class SendMessageProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        executor: StoreExecutor,
        delay_levels: dict[int, int],
        max_message_size: int,
        stats: BrokerStatsManager,
    ) -> None:
        self.store = store
        self.stats = stats
        self.topics = topics
        self.executor = executor
        self.max_delay_level = max(delay_levels)
        self.max_message_size = max_message_size
        self._round_robin: dict[str, int] = {}  # per topic: the next round-robin position
        self.timer: TimerMessageStore | None = None   # parks timer messages (set by the broker)
        # whether the store answers a put without waiting (not under SYNC flush nor on a
        # SYNC_MASTER, whose answers wait for the disk or a slave): the store's own method
        self.puts_now: Callable[[], bool] = store.puts_now

    async def process(self, request: rmq_pb2.SendMessageRequest, peer: str) -> rmq_pb2.SendMessageResponse:
        try:
            batch, queue_ids, delayed, timers = self.build_batch(request, born_host_from_peer(peer))
            with self._timer_admission(len(timers)):
                result = self._put_inline(batch)
                if result is None:
                    result = await self.executor.run(self.store.put_batch, batch)
                else:
                    await asyncio.sleep(0)   # the pulls this put woke answer before this call does
                if result.status is not PutMessageStatus.PUT_OK:
                    self.explain_size_refusal(batch)
                    check_put_status(result.status)
        except BrokerError as error:
            return rmq_pb2.SendMessageResponse(status=error.status())
        self.stats.record_put(request.topic, len(queue_ids), sum(map(len, batch.bodies)))
        code, reason = STORED_ON_MASTER_ONLY.get(result.status, (rmq_pb2.OK, ""))
        response = rmq_pb2.SendMessageResponse(status=rmq_pb2.Status(code=code, message=reason))
        response.msg_ids.extend(result.msg_ids())
        response.queue_ids.extend(queue_ids)
        queue_offsets = result.queue_offsets
        if delayed:
            queue_offsets = queue_offsets.copy()
            queue_offsets[delayed] = -1  # a delayed message's real offset is assigned on delivery
        response.queue_offsets.extend(queue_offsets.tolist())
        if timers:
            response.recall_handles.extend(self._recall_handles(timers, result.queue_offsets))
        return response

    def _recall_handles(self, timers: dict[int, dict[str, str]], offsets: np.ndarray) -> list[str]:
        """Per message: the recall handle of one parked in the timer queue, else ""."""
        assert self.timer is not None
        return [self.timer.recall_handle(timers[index], offset) if index in timers else ""
                for index, offset in enumerate(offsets.tolist())]

    @contextmanager
    def _timer_admission(self, count: int) -> Iterator[None]:
        """Around a put holding `count` timers (TimerMessageStore.admit): they count against the
        pending budgets from now, and no longer when the put fails."""
        if not count or self.timer is None:
            yield
            return
        self.timer.admit(count)
        try:
            yield
        except BaseException:
            self.timer.release(count)
            raise

    async def send_one(self, message: OneMessage, born_host: bytes, config: TopicConfig | None = None
                       ) -> SendResult:
        """One message on the single-message path: no protobuf, no numpy column, stored on the
        event loop when the put need not wait. `config`: the topic's, when the caller has taken
        it from `writeable_topic` already. Raises BrokerError for a refused message."""
        topic, queue_id, record, full = self._one_record(message, born_host, config)
        if record.topic == TIMER_TOPIC:
            with self._timer_admission(1):
                result = await self._store_one(record)
                self._check_stored(record, result)
        else:   # no context manager per ordinary send: ~9 Python calls on the single-message path
            result = await self._store_one(record)
            self._check_stored(record, result)
        return self._sent(topic, queue_id, record, full, result)

    def send_one_now(self, message: OneMessage, born_host: bytes) -> SendResult | None:
        """`send_one` as a plain call, for a plain message (no delay level, no timer property)
        whose put need not wait: the same checks in the same order (they raise BrokerError), the
        record stored on the calling (event-loop) thread. None, nothing stored, for any other
        message or when the store would wait (SYNC flush, SYNC_MASTER, the put lock taken, a new
        CommitLog file): the caller then takes `send_one`, whose round robin goes on from here."""
        if message.delay_level or (message.properties and self.timer is not None
                                   and has_timer(message.properties)) or not self.puts_now():
            return None
        topic, queue_id, record, full = self._one_record(message, born_host)
        result = self.store.try_put_one(record)
        if result is None:
            return None
        if result.status is not PutMessageStatus.PUT_OK:
            self._check_stored(record, result)
        return self._sent(topic, queue_id, record, full, result)

    def _one_record(self, message: OneMessage, born_host: bytes, config: TopicConfig | None = None
                    ) -> tuple[str, int, OneRecord, dict[str, str]]:
        """The checks of one message before its put, in their order (broker role, topic, body,
        queue, properties; the store checks sizes): its topic, queue id, record to store and the
        properties it encodes when it has more than tags and keys. Raises BrokerError."""
        if config is None:
            config = self.writeable_topic(message.topic)
        topic, body = config.topic_name, message.body
        if not body:
            raise BrokerError(rmq_pb2.MESSAGE_ILLEGAL, "message body is empty")
        queue_id = message.queue_id
        if queue_id < 0:
            position = self._round_robin.get(topic, 0)
            self._round_robin[topic] = position + 1
            queue_id = position % config.write_queue_nums
        elif queue_id >= config.write_queue_nums:
            raise illegal_argument(self._queue_out_of_range(queue_id, config))
        full: dict[str, str] = {}
        if message.properties or message.delay_level:
            stored_topic, stored_queue_id, properties, full = self._full_properties(
                message.tags, message.keys, message.properties, message.delay_level, topic, queue_id)
        else:
            stored_topic, stored_queue_id = topic, queue_id
            properties = simple_properties(message.tags, message.keys)
        record = OneRecord(stored_topic, stored_queue_id, body, properties, message.flag,
                           message.born_timestamp or int(time.time() * 1000), born_host)
        return topic, queue_id, record, full

    def _check_stored(self, record: OneRecord, result: PutMessageResult) -> None:
        """A put not stored raises the BrokerError of its status (a too-large message names its
        size)."""
        if result.status is not PutMessageStatus.PUT_OK:
            self._check_size(record.topic, record.body, record.properties)
            check_put_status(result.status)

    def _sent(self, topic: str, queue_id: int, record: OneRecord, full: dict[str, str],
              result: PutMessageResult) -> SendResult:
        """The answer to a stored single message, counted in the topic's put statistics."""
        self.stats.record_put(topic, 1, len(record.body))
        code, reason = (rmq_pb2.OK, "") if result.status is PutMessageStatus.PUT_OK \
            else STORED_ON_MASTER_ONLY[result.status]
        if record.topic == topic:
            return SendResult(code, reason, result.msg_id, queue_id, result.queue_offset)
        recall_handle = ""
        if record.topic == TIMER_TOPIC and self.timer is not None:
            recall_handle = self.timer.recall_handle(full, result.queue_offset)
        return SendResult(code, reason, result.msg_id, queue_id, -1, recall_handle)

    async def _store_one(self, record: OneRecord | PutMessageStatus) -> PutMessageResult:
        """The record stored on the event loop, or on a store thread when the put would wait."""
        if isinstance(record, PutMessageStatus):
            return PutMessageResult(record)
        result = self.store.try_put_one(record)
        if result is None:
            result = await self.executor.run(self.store.put_one, record)
        return result

    def _put_inline(self, batch: MessageBatch) -> PutBatchResult | None:
        """The batch stored on the calling (event loop) thread, or None when it is too large or
        the put would wait."""
        if len(batch) > INLINE_PUT_MAX_MESSAGES or sum(map(len, batch.bodies)) > INLINE_PUT_MAX_BODY_BYTES:
            return None
        return self.store.try_put_batch(batch)

    def writeable_topic(self, topic: str) -> TopicConfig:
        """The topic's config, refused when the broker is a slave or the topic is not writeable."""
        if self.store.config.broker_role is BrokerRole.SLAVE:
            raise NotMaster("this broker is a SLAVE (read-only): send to the master of its broker group")
        config = self.topics.require(topic)
        if not config.writeable:
            raise BrokerError(rmq_pb2.NO_PERMISSION, f"the topic[{topic}] sending message is forbidden")
        return config

    async def put_records(self, topic: str, records: list[MessageToStore]) -> list[PutMessageResult]:
        """Store records a protocol adapter built itself (RocketMQ 5 sends: timer and half messages
        among them) for `topic`, whole or not at all, counted in the topic's put statistics like
        every other send. Raises BrokerError for a refused batch."""
        with self._timer_admission(sum(record.topic == TIMER_TOPIC for record in records)):
            if len(records) == 1:
                results = [await self._store_one(one_record(records[0]))]
            else:
                results = await self.executor.run(self.store.put_messages, records)
            check_put_results(results)
        self.stats.record_put(topic, len(records), sum(len(record.body) for record in records))
        return results

    def build_batch(
        self, request: rmq_pb2.SendMessageRequest, born_host: bytes
    ) -> tuple[MessageBatch, list[int], list[int], dict[int, dict[str, str]]]:
        """The batch to store (columns), each message's real queue id, the positions of the
        delayed ones, and the properties of the timer ones by position (their recall handles).
        Raises BrokerError naming the first bad message."""
        config = self.writeable_topic(request.topic)
        if request.HasField("columns"):
            if request.messages:
                raise illegal_argument("a request carries messages or columns, not both")
            return self._column_batch(request.columns, config, born_host)
        if not request.messages:
            raise illegal_argument("the batch holds no messages")
        return self._message_batch(request.messages, config, born_host)

    def _message_batch(
        self, messages: Sequence[rmq_pb2.Message], config: TopicConfig, born_host: bytes
    ) -> tuple[MessageBatch, list[int], list[int], dict[int, dict[str, str]]]:
        topic = config.topic_name
        counter = itertools.count(self._round_robin.get(topic, 0))
        topics, store_queue_ids, bodies, properties, flags, born_timestamps = [], [], [], [], [], []
        queue_ids, delayed = [], []
        timers: dict[int, dict[str, str]] = {}
        for index, message in enumerate(messages):
            # Hot path: each protobuf field is read once (every read builds a Python object); sizes
            # are left to the store, which checks the whole batch before writing (explain_size_refusal).
            try:
                body = message.body
                if not body:
                    raise BrokerError(rmq_pb2.MESSAGE_ILLEGAL, "message body is empty")
                queue_id = self._queue_id(message, config, counter)
                user_properties, delay_level = message.properties, message.delay_level
                if user_properties or delay_level:
                    stored_topic, stored_queue_id, properties_field, full = self._full_properties(
                        message.tags, message.keys, user_properties, delay_level, topic, queue_id
                    )
                    if stored_topic != topic:   # a delay level's or the timer's queue
                        delayed.append(index)
                    if stored_topic == TIMER_TOPIC:
                        timers[index] = full
                else:
                    stored_topic, stored_queue_id = topic, queue_id
                    properties_field = simple_properties(message.tags, message.keys)
            except BrokerError as error:
                raise _naming_message(error, index, len(messages)) from None
            topics.append(stored_topic)
            store_queue_ids.append(stored_queue_id)
            queue_ids.append(queue_id)
            bodies.append(body)
            properties.append(properties_field)
            flags.append(message.flag)
            born_timestamps.append(message.born_timestamp)
        self._round_robin[topic] = next(counter)
        born = np.array(born_timestamps, dtype=np.int64)
        born[born == 0] = int(time.time() * 1000)
        batch = MessageBatch.of(
            topics,
            store_queue_ids,
            bodies,
            properties,
            flags=flags,
            born_timestamps=born,
            born_hosts=born_host,
        )
        return batch, queue_ids, delayed, timers

    def _column_batch(
        self, columns: rmq_pb2.MessageColumns, config: TopicConfig, born_host: bytes
    ) -> tuple[MessageBatch, list[int], list[int], dict[int, dict[str, str]]]:
        """A MessageColumns request: bodies cut from one buffer, queues round-robin."""
        lengths = np.array(columns.body_lengths, dtype=np.int64)
        count = len(lengths)
        if count == 0:
            raise illegal_argument("the batch holds no messages")
        empty = np.flatnonzero(lengths <= 0)
        if len(empty):
            error = BrokerError(rmq_pb2.MESSAGE_ILLEGAL, "message body is empty")
            raise _naming_message(error, int(empty[0]), count)
        data = columns.bodies
        ends = np.cumsum(lengths)
        if ends[-1] != len(data):
            raise illegal_argument(
                f"body_lengths add up to {int(ends[-1])} bytes but bodies holds {len(data)}"
            )
        starts = (ends - lengths).tolist()
        bodies = [data[start:end] for start, end in zip(starts, ends.tolist(), strict=True)]
        tags, keys = _per_message(columns.tags, count, "tags"), _per_message(columns.keys, count, "keys")
        try:
            if len(tags) == 1 and len(keys) == 1:
                properties = [simple_properties(tags[0], keys[0])] * count
            else:
                every_tags, every_keys = tags * (count // len(tags)), keys * (count // len(keys))
                properties = [simple_properties(t, k) for t, k in zip(every_tags, every_keys, strict=True)]
        except BrokerError as error:
            raise BrokerError(error.code, f"columns: {error.message}") from None
        topic = config.topic_name
        start = self._round_robin.get(topic, 0)
        self._round_robin[topic] = start + count
        queue_ids = (start + np.arange(count)) % config.write_queue_nums
        batch = MessageBatch.of(
            topic,
            queue_ids,
            bodies,
            properties,
            born_timestamps=int(time.time() * 1000),
            born_hosts=born_host,
        )
        return batch, queue_ids.tolist(), [], {}

    def _queue_id(self, message: rmq_pb2.Message, config: TopicConfig, counter: itertools.count[int]) -> int:
        if not message.HasField("queue_id"):
            return next(counter) % config.write_queue_nums
        if not 0 <= message.queue_id < config.write_queue_nums:
            raise illegal_argument(self._queue_out_of_range(message.queue_id, config))
        return message.queue_id

    @staticmethod
    def _queue_out_of_range(queue_id: int, config: TopicConfig) -> str:
        return (f"queue_id {queue_id} is out of range: topic {config.topic_name!r} has "
                f"{config.write_queue_nums} write queues")

    def _full_properties(
        self, tags: str, keys: str, user_properties: Mapping[str, str], delay_level: int, topic: str,
        queue_id: int,
    ) -> tuple[str, int, bytes, dict[str, str]]:
        """(topic, queue id, properties field, the properties it encodes) of a message with user
        properties or a delay level."""
        if delay_level < 0:
            raise illegal_argument(f"delay_level must not be negative, not {delay_level}")
        properties = dict(user_properties)
        if tags:
            properties[mf.PROPERTY_TAGS] = tags
        if keys:
            properties[mf.PROPERTY_KEYS] = keys
        check_no_separators(properties)
        if delay_level:
            # CommitLog#putMessage: park the message in the schedule topic (level capped at the maximum).
            level = min(delay_level, self.max_delay_level)
            properties[mf.PROPERTY_REAL_TOPIC] = topic
            properties[mf.PROPERTY_REAL_QUEUE_ID] = str(queue_id)
            properties[mf.PROPERTY_DELAY_TIME_LEVEL] = str(level)
            topic, queue_id = SCHEDULE_TOPIC, delay_level_to_queue_id(level)
        elif self.timer is not None:
            topic, queue_id = self.timer.park(properties, topic, queue_id)
        return topic, queue_id, mf.encode_properties(properties).encode(), properties

    def explain_size_refusal(self, batch: MessageBatch) -> None:
        """The store refused the batch: raise naming the first message that is too large."""
        for index, (topic, body, properties) in enumerate(
            zip(batch.topics, batch.bodies, batch.properties, strict=True)
        ):
            try:
                self._check_size(topic, body, properties)
            except BrokerError as error:
                raise _naming_message(error, index, len(batch)) from None

    def _check_size(self, topic: str, body: bytes, properties: bytes) -> None:
        if len(properties) > mf.MAX_PROPERTIES_LENGTH:
            raise BrokerError(
                rmq_pb2.PROPERTIES_SIZE_EXCEEDED,
                f"properties take {len(properties)} bytes, the maximum is {mf.MAX_PROPERTIES_LENGTH}",
            )
        size = mf.calc_msg_length(len(body), len(topic.encode()), len(properties))
        if size > self.max_message_size:
            raise BrokerError(
                rmq_pb2.MESSAGE_SIZE_EXCEEDED,
                f"message takes {size} bytes, the maximum is {self.max_message_size}",
            )


def one_record(message: MessageToStore) -> OneRecord | PutMessageStatus:
    """A MessageToStore as the single-message path's record; MESSAGE_ILLEGAL when a property
    name or value holds a separator."""
    properties = encode_properties(message.properties)
    if properties is None:
        return PutMessageStatus.MESSAGE_ILLEGAL
    return OneRecord(message.topic, message.queue_id, message.body, properties, message.flag,
                     message.born_timestamp, message.born_host, message.sys_flag, message.reconsume_times)


def _per_message(values: Sequence[str], count: int, name: str) -> list[str]:
    """A MessageColumns string column as one value for every message or one per message."""
    if len(values) in (0, 1, count):
        return list(values) or [""]
    raise illegal_argument(f"columns.{name} holds {len(values)} values for {count} messages")


_TAGS_PROPERTIES: dict[str, bytes] = {}


def simple_properties(tags: str, keys: str) -> bytes:
    """The properties field of a message with only tags and keys (TAGS before KEYS); the
    tags-only fields, a producer's common case, are cached."""
    if not keys:
        cached = _TAGS_PROPERTIES.get(tags)
        if cached is not None:
            return cached
    properties = {}
    if tags:
        properties[mf.PROPERTY_TAGS] = tags
    if keys:
        properties[mf.PROPERTY_KEYS] = keys
    check_no_separators(properties)
    encoded = mf.encode_properties(properties).encode()
    if not keys and len(_TAGS_PROPERTIES) < 4096:
        _TAGS_PROPERTIES[tags] = encoded
    return encoded


def check_no_separators(properties: dict[str, str]) -> None:
    """A separator inside a name or value would split it when the record is read back."""
    for name, value in properties.items():
        if mf.NAME_VALUE_SEPARATOR in name + value or mf.PROPERTY_SEPARATOR in name + value:
            raise BrokerError(
                rmq_pb2.MESSAGE_ILLEGAL,
                f"property {name!r} contains a reserved separator character (\\x01 or \\x02)",
            )


def _naming_message(error: BrokerError, index: int, count: int) -> BrokerError:
    return BrokerError(error.code, f"message {index}: {error.message}" if count > 1 else error.message)
