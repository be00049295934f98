"""Shared pieces of the SDK unit tests: messages as a pull would decode them, a scheduler
that records instead of waiting, and a QueueAdmin with fixed broker answers."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rmq import message_format as mf
from rmq.connector.client import MessageQueue, RmqError
from rmq.connector.message import MessageExt
from rmq.connector.scheduled_executor import ScheduledExecutor

MQ = MessageQueue("TopicTest", "broker-a", 0)


def message(offset: int, body: bytes = b"x", mq: MessageQueue = MQ, tags: str = "") -> MessageExt:
    properties = {mf.PROPERTY_TAGS: tags} if tags else {}
    return MessageExt(
        topic=mq.topic,
        body=body,
        properties=properties,
        queue_id=mq.queue_id,
        queue_offset=offset,
        commit_log_offset=1000 + offset,
        reconsume_times=0,
        born_timestamp=0,
        store_timestamp=0,
        store_host=bytes(8),
        message_queue=mq,
        store_size=100,
    )


class RecordingScheduler(ScheduledExecutor):
    """Records (delay, task) instead of running them; `run_all()` runs what is recorded."""

    def __init__(self) -> None:
        super().__init__("test-scheduler")
        self.scheduled: list[tuple[float, Callable[[], None]]] = []

    def schedule(self, delay_s: float, task: Callable[[], None]) -> None:
        self.scheduled.append((delay_s, task))

    def run_all(self) -> None:
        tasks, self.scheduled = self.scheduled, []
        for _, task in tasks:
            task()


class FixedAdmin:
    """A QueueAdmin answering from fixed tables; `max_offsets[mq] = None` makes the lookup fail;
    the `young` queues still hold their first message in the broker's memory."""

    def __init__(
        self,
        queues: dict[str, list[MessageQueue]],
        consumers: list[str],
        max_offsets: dict[MessageQueue, int | None] | None = None,
    ) -> None:
        self.queues = queues
        self.consumers = consumers
        self.max_offsets = max_offsets or {}
        self.young: set[MessageQueue] = set()

    def message_queues(self, topic: str) -> Sequence[MessageQueue]:
        if topic not in self.queues:
            raise RmqError(2, f"topic {topic} does not exist")
        return self.queues[topic]

    def consumer_ids(self, topic: str) -> list[str]:
        return list(self.consumers)

    def max_offset(self, mq: MessageQueue) -> int:
        value = self.max_offsets.get(mq, 0)
        if value is None:
            raise RmqError(9, "broker unreachable")
        return value

    def first_message_in_memory(self, mq: MessageQueue) -> bool:
        return mq in self.young

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return 7
