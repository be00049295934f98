"""What a PushConsumer's listener sees and returns (RocketMQ MessageListenerConcurrently,
ConsumeConcurrentlyStatus, ConsumeConcurrentlyContext; spec consumer-pull-rebalance §16).

A listener is any callable `(messages, context) -> ConsumeConcurrentlyStatus`. Returning
RECONSUME_LATER, returning None, raising, or running past the consume timeout all mean the
batch failed: clustering consumers send it back to the broker for a delayed retry
(`context.delay_level_when_next_consume`: 0 lets the broker choose, > 0 a level, < 0 the DLQ
at once); broadcasting consumers log and drop it. `context.ack_index` marks a partial
success: messages up to and including that index succeeded.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rmq.connector.client import MessageQueue
from rmq.connector.message import MessageExt

ACK_ALL = 2**31 - 1   # ConsumeConcurrentlyContext.ackIndex default: Integer.MAX_VALUE


class ConsumeConcurrentlyStatus(enum.Enum):
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


@dataclass
class ConsumeConcurrentlyContext:
    message_queue: MessageQueue
    delay_level_when_next_consume: int = 0
    ack_index: int = ACK_ALL


class MessageListenerConcurrently(Protocol):
    def __call__(self, messages: Sequence[MessageExt], context: ConsumeConcurrentlyContext
                 ) -> ConsumeConcurrentlyStatus | None: ...
