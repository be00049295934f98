"""MessageBatch: a Producer's list of plain messages of one topic, checked and encoded once
(RocketMQ MessageBatch.generateFromList + encode; spec consumer-pull-rebalance §17.1).

A list whose messages all carry only a body, tags and keys (no properties, no delay level) for one
topic is checked column by column (one pass per field instead of Message.check per message) and
encoded straight into MessageColumns requests (RmqClient.column_requests), without an
OutgoingMessage per message. The requests are built once and sent again as they are when the
Producer retries on another broker. Any other list, or one with a message that fails a check,
returns None and takes the per-message path, which names the message at fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

from rmq.connector.client import RmqClient
from rmq.connector.message import Message
from rmq.v1 import rmq_pb2

_TOPIC, _BODY, _TAGS, _KEYS = (attrgetter(name) for name in ("topic", "body", "tags", "keys"))
_PROPERTIES, _DELAY_LEVEL = attrgetter("properties"), attrgetter("delay_level")


@dataclass(frozen=True)
class MessageBatch:
    topic: str
    count: int
    requests: list[rmq_pb2.SendMessageRequest]

    @classmethod
    def generate_from_list(cls, client: RmqClient, messages: Sequence[Message], max_message_size: int
                           ) -> MessageBatch | None:
        """The batch of `messages`, None unless they are plain messages of one topic that pass
        Message.check (the caller checks them one by one then)."""
        if not messages or set(map(type, messages)) != {Message}:
            return None
        topic = messages[0].topic
        if (not topic or set(map(_TOPIC, messages)) != {topic} or any(map(_PROPERTIES, messages))
                or any(map(_DELAY_LEVEL, messages)) or any(map(Message.is_timer, messages))):
            return None
        bodies = list(map(_BODY, messages))
        if set(map(type, bodies)) != {bytes}:
            return None
        sizes = list(map(len, bodies))
        if min(sizes) == 0 or max(sizes) > max_message_size:
            return None
        tags, keys = list(map(_TAGS, messages)), list(map(_KEYS, messages))
        if set(map(type, keys)) != {str}:
            keys = [m.keys_text for m in messages]
        return cls(topic, len(bodies), client.column_requests(topic, bodies, tags, keys))
