"""Messages of the client SDK (RocketMQ Message / MessageExt).

`Message` is what a Producer sends; `MessageExt` is what a PushConsumer's listener receives,
decoded record by record from a pull's `PackedMessages` through `rmq.stored_message` (the
layout the broker and the store share). A message that came back through the group's retry
topic (or sits in its DLQ) shows its original topic (RocketMQ resetRetryAndNamespace), while
`message_queue` stays the queue it was pulled from.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from rmq import message_format as mf
from rmq import retry
from rmq.connector.client import MessageQueue, OutgoingMessage
from rmq.connector.errors import ConfigError
from rmq.v1 import rmq_pb2

DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024  # DefaultMQProducer.maxMessageSize (body bytes)


@dataclass
class Message:
    """One message to send: topic, body, optional tags, keys (space-separated, or a list),
    user properties and a delay level (1..18 with the broker's default levels; 0 none) or a
    timer: `deliver_time_ms` (epoch ms, or an aware datetime) or `delay` (a timedelta), sent as
    RocketMQ's TIMER_DELIVER_MS / TIMER_DELAY_MS property (docs/manual/sdk.md: timer messages)."""

    topic: str
    body: bytes
    tags: str = ""
    keys: str | list[str] = ""
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    deliver_time_ms: int | datetime | None = None
    delay: timedelta | None = None

    def is_timer(self) -> bool:
        return self.deliver_time_ms is not None or self.delay is not None

    def timer_properties(self) -> dict[str, str]:
        """The timer property this message carries ({} without a timer)."""
        if self.delay is not None:
            return {mf.PROPERTY_TIMER_DELAY_MS: str(int(self.delay.total_seconds() * 1000))}
        if isinstance(self.deliver_time_ms, datetime):
            return {mf.PROPERTY_TIMER_DELIVER_MS: str(int(self.deliver_time_ms.timestamp() * 1000))}
        if self.deliver_time_ms is not None:
            return {mf.PROPERTY_TIMER_DELIVER_MS: str(self.deliver_time_ms)}
        return {}

    @property
    def keys_text(self) -> str:
        return self.keys if isinstance(self.keys, str) else mf.KEY_SEPARATOR.join(self.keys)

    def check(self, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> None:
        """Validators.checkMessage: raise ConfigError (a ValueError) naming what is wrong, before any send."""
        if not self.topic:
            raise ConfigError("message has no topic")
        if not isinstance(self.body, (bytes, bytearray, memoryview)):
            raise ConfigError(f"message body must be bytes, not {type(self.body).__name__}")
        if not self.body:
            raise ConfigError(f"message body is empty (topic {self.topic})")
        if len(self.body) > max_message_size:
            raise ConfigError(f"message body is {len(self.body)} bytes, the maximum is {max_message_size}")
        if self.delay_level < 0:
            raise ConfigError(f"delay_level must not be negative, not {self.delay_level}")
        self._check_timer()

    def _check_timer(self) -> None:
        if self.deliver_time_ms is not None and self.delay is not None:
            raise ConfigError("give deliver_time_ms or delay, not both")
        if self.is_timer() and self.delay_level:
            raise ConfigError("a message has a delay level or a timer (deliver_time_ms, delay), not both")
        if isinstance(self.deliver_time_ms, datetime) and self.deliver_time_ms.tzinfo is None:
            raise ConfigError("deliver_time_ms as a datetime must carry a time zone (e.g. datetime.now(UTC))")
        if isinstance(self.deliver_time_ms, int) and (isinstance(self.deliver_time_ms, bool)
                                                      or self.deliver_time_ms < 0):
            raise ConfigError(
                f"deliver_time_ms must be epoch milliseconds (>= 0), not {self.deliver_time_ms!r}")
        if self.deliver_time_ms is not None and not isinstance(self.deliver_time_ms, (int, datetime)):
            raise ConfigError(f"deliver_time_ms must be an int (epoch ms) or a datetime, "
                              f"not {type(self.deliver_time_ms).__name__}")
        if self.delay is not None and (not isinstance(self.delay, timedelta) or self.delay < timedelta(0)):
            raise ConfigError(f"delay must be a timedelta of zero or more, not {self.delay!r}")

    def to_outgoing(self, queue_id: int | None = None) -> OutgoingMessage:
        return OutgoingMessage(
            bytes(self.body),
            self.tags,
            self.keys_text,
            {**self.properties, **self.timer_properties()} if self.properties or self.is_timer() else {},
            queue_id=queue_id,
            delay_level=self.delay_level,
        )


@dataclass(slots=True)
class MessageExt:
    """A received message. `topic` is the original topic even for a retried copy;
    `reconsume_times` counts earlier failed attempts; `commit_log_offset` names the stored
    record for send-back. Tags, keys and the message id are read on demand."""

    topic: str
    body: bytes
    properties: dict[str, str]
    queue_id: int
    queue_offset: int
    commit_log_offset: int
    reconsume_times: int
    born_timestamp: int  # epoch ms
    store_timestamp: int  # epoch ms
    store_host: bytes
    message_queue: MessageQueue  # the queue it was pulled from (the retry topic's, for a retry)
    store_size: int

    @property
    def tags(self) -> str:
        return self.properties.get(mf.PROPERTY_TAGS, "")

    @property
    def keys(self) -> str:
        return self.properties.get(mf.PROPERTY_KEYS, "")

    @property
    def broker_name(self) -> str:
        return self.message_queue.broker_name

    @property
    def msg_id(self) -> str:
        """The offset message id: store host and CommitLog offset."""
        return mf.message_id(self.store_host, self.commit_log_offset)

    @property
    def origin_msg_id(self) -> str:
        """The id of the first copy (a retried copy carries it in ORIGIN_MESSAGE_ID)."""
        return self.properties.get(retry.PROPERTY_ORIGIN_MESSAGE_ID) or self.msg_id


_PROPERTIES_CACHE_SIZE = 1024
# The header fields a MessageExt takes; the others are skipped as pad bytes (fewer objects per record).
_TAKEN = ("queue_id", "queue_offset", "physical_offset", "born_timestamp", "store_timestamp", "store_host",
          "reconsume_times", "body_length")
_TAKEN_HEADER = struct.Struct(">" + "".join(code if name in _TAKEN else f"{struct.calcsize('>' + code)}x"
                                            for name, code in mf.HEADER_FIELDS))
assert _TAKEN_HEADER.size == mf.BODY_POS


def decode_messages(packed: rmq_pb2.PackedMessages, mq: MessageQueue) -> list[MessageExt]:
    """Every record of one pull from `mq` as a MessageExt: the per-message hot path of a
    PushConsumer, so it reads the header with the layout's one struct (rmq.message_format
    HEADER) and walks body, topic and properties itself (rmq.stored_message does the same for
    the broker's slow paths), decoding each distinct topic and properties field once."""
    if not packed.count:
        return []
    buffer = packed.records
    sizes = struct.unpack(f"<{packed.count}i", packed.sizes)  # little-endian int32 (PackedMessages)
    unpack_header = _TAKEN_HEADER.unpack_from
    body_pos = mf.BODY_POS
    topics: dict[bytes, tuple[str, bool]] = {}   # raw topic -> (topic, a retry/DLQ copy)
    properties_of: dict[bytes, dict[str, str]] = {}
    result: list[MessageExt] = []
    append = result.append
    position = 0
    for size in sizes:
        (
            queue_id,
            queue_offset,
            physical_offset,
            born_timestamp,
            store_timestamp,
            store_host,
            reconsume_times,
            body_length,
        ) = unpack_header(buffer, position)
        cursor = position + body_pos
        body = buffer[cursor : cursor + body_length]
        cursor += body_length
        end = cursor + 1 + buffer[cursor]
        raw_topic = buffer[cursor + 1 : end]
        properties_end = end + 2 + int.from_bytes(buffer[end : end + 2], "big")
        raw_properties = buffer[end + 2 : properties_end]
        known = topics.get(raw_topic)
        if known is None:
            text = raw_topic.decode()
            known = topics[raw_topic] = (text, retry.is_group_copy_topic(text))
        topic, group_copy = known
        cached = properties_of.get(raw_properties)
        if cached is None:
            cached = mf.decode_properties(raw_properties.decode())
            if len(properties_of) < _PROPERTIES_CACHE_SIZE:
                properties_of[raw_properties] = cached
        properties = cached.copy()
        if group_copy:
            topic = properties.get(retry.PROPERTY_RETRY_TOPIC, topic)
        append(
            MessageExt(
                topic,
                body,
                properties,
                queue_id,
                queue_offset,
                physical_offset,
                reconsume_times,
                born_timestamp,
                store_timestamp,
                store_host,
                mq,
                size,
            )
        )
        position += size
    return result
