"""What an orderly PushConsumer's listener sees and returns (RocketMQ MessageListenerOrderly,
ConsumeOrderlyStatus, ConsumeOrderlyContext; spec consumer-pull-rebalance §17).

A listener is any callable `(messages, context) -> ConsumeOrderlyStatus`, called for one
queue at a time with that queue's messages in offset order. SUCCESS commits them;
SUSPEND_CURRENT_QUEUE_A_MOMENT (also what raising or returning None means) hands the same
messages again after `context.suspend_current_queue_time_millis` (default: the consumer's
`suspend_current_queue_time_millis`, 1 s), without send-back. With `context.auto_commit`
off, COMMIT commits, ROLLBACK consumes again, and SUCCESS leaves the offset where it is.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from rmq.connector.client import MessageQueue
from rmq.connector.message import MessageExt


class ConsumeOrderlyStatus(enum.Enum):
    SUCCESS = "SUCCESS"
    ROLLBACK = "ROLLBACK"
    COMMIT = "COMMIT"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


@dataclass
class ConsumeOrderlyContext:
    message_queue: MessageQueue
    auto_commit: bool = True
    suspend_current_queue_time_millis: int = -1   # -1: the consumer's setting


class MessageListenerOrderly(Protocol):
    def __call__(self, messages: Sequence[MessageExt], context: ConsumeOrderlyContext
                 ) -> ConsumeOrderlyStatus | None: ...
