"""MessageQueue: one queue of a topic on one broker (RocketMQ MessageQueue), the unit of
allocation, offsets and locks on both sides."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class MessageQueue:
    """(topic, broker_name, queue_id); sorts like Java MessageQueue.compareTo (spec
    consumer-pull-rebalance §2.1)."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}:{self.broker_name}:{self.queue_id}"
