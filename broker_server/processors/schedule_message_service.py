"""Delayed delivery (RocketMQ ScheduleMessageService, spec consumer-pull-rebalance §19,
TV-16): level N's messages wait in queue N-1 of SCHEDULE_TOPIC_XXXX; one task per
level reads them in order and, once a message's deliver time (store time + the level's delay)
has come, re-puts it to its real topic and queue, where it is dispatched and becomes
consumable. Per-level progress is persisted to `<store>/config/delayOffset.json`.

A level with nothing pending sleeps until the store dispatches a new message to its queue;
one with a message not yet due sleeps exactly until that message's deliver time."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rmq import message_format as mf
from rmq.broker_server.background_tasks import cancel_all
from rmq.broker_server.errors import BrokerError
from rmq.broker_server.json_file import read_json, write_json_atomically
from rmq.broker_server.processors.delay_levels import delay_level_to_queue_id, queue_id_to_delay_level
from rmq.broker_server.processors.names import SCHEDULE_TOPIC
from rmq.broker_server.processors.put_status import check_put_results
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.statuses import GetMessageStatus
from rmq.store import MessageStore, MessageToStore
from rmq.stored_message import StoredMessage, decode_records

log = logging.getLogger(__name__)
SCHEDULE_GROUP = "rmq_sys_schedule"
DELAY_FOR_A_PERIOD_MS = 10000  # retry after a failed re-put
BATCH_SIZE = 256
_MOVED = frozenset({GetMessageStatus.OFFSET_TOO_SMALL, GetMessageStatus.OFFSET_OVERFLOW_BADLY})


def correct_deliver_timestamp(now_ms: int, deliver_timestamp: int, delay_ms: int) -> int:
    """A deliver time further away than the level's delay (clock moved back) means now."""
    return now_ms if deliver_timestamp > now_ms + delay_ms else deliver_timestamp


def message_timeup(message: StoredMessage) -> MessageToStore:
    """The delayed message restored to its real topic and queue, without its delay level."""
    properties = dict(message.properties)
    properties.pop(mf.PROPERTY_DELAY_TIME_LEVEL, None)
    real_topic, real_queue = properties[mf.PROPERTY_REAL_TOPIC], int(properties[mf.PROPERTY_REAL_QUEUE_ID])
    return MessageToStore.copy_of(message, real_topic, real_queue, properties, message.reconsume_times)


class ScheduleMessageService:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        executor: StoreExecutor,
        store_path: Path,
        delay_levels: dict[int, int],
        persist_interval_ms: int = 10000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.topics = topics
        self.executor = executor
        self.path = store_path / "config" / "delayOffset.json"
        self.delay_levels = delay_levels
        self.persist_interval_ms = persist_interval_ms
        self._clock = clock
        self.offsets: dict[int, int] = {}
        self._arrivals: dict[int, asyncio.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    def load(self) -> None:
        content = read_json(self.path) or {}
        try:
            self.offsets = {
                int(level): int(offset) for level, offset in content.get("offsetTable", {}).items()
            }
        except (AttributeError, ValueError) as error:
            raise ValueError(f"{self.path} has an unexpected layout: {error}") from error

    def persist(self) -> None:
        write_json_atomically(self.path, self._snapshot())

    def set_offsets(self, offsets: dict[int, int]) -> None:
        """A slave takes the master's delay progress (SlaveSynchronize); it delivers nothing itself."""
        self.offsets = dict(offsets)

    def _snapshot(self) -> dict[str, Any]:
        return {"offsetTable": {str(level): offset for level, offset in self.offsets.items()}}

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._arrivals = {level: asyncio.Event() for level in self.delay_levels}
        self._tasks = [self._loop.create_task(self._deliver_forever(level)) for level in self.delay_levels]
        self._tasks.append(self._loop.create_task(self._persist_forever()))

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        self.persist()

    def on_dispatch(self, queue_id: int) -> None:
        """Store dispatch thread: a message entered queue `queue_id` of SCHEDULE_TOPIC (a delay
        level's; the broker calls this for that topic only)."""
        if self._loop is None:
            return
        event = self._arrivals.get(queue_id_to_delay_level(queue_id))
        if event is not None:
            try:
                self._loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # loop closed during shutdown
                pass

    async def deliver_due(self, level: int) -> int | None:
        """Deliver the level's due messages (DeliverDelayedMessageTimerTask). Returns ms to
        wait before the next due message, 0 to continue at once, None when the queue is
        drained."""
        offset = self.offsets.get(level, 0)
        result = await self.executor.run(
            self.store.get_message,
            SCHEDULE_GROUP,
            SCHEDULE_TOPIC,
            delay_level_to_queue_id(level),
            offset,
            BATCH_SIZE,
        )
        if result.status in _MOVED:
            self.offsets[level] = result.next_begin_offset
            return 0
        if not result.message_count:
            return None
        now_ms = int(self._clock() * 1000)
        delay_ms = self.delay_levels[level]
        due, countdown = [], None
        for message in decode_records(bytes(result.buffer), result.sizes):
            deliver_timestamp = correct_deliver_timestamp(
                now_ms, message.store_timestamp + delay_ms, delay_ms
            )
            if deliver_timestamp > now_ms:
                countdown = deliver_timestamp - now_ms
                break
            due.append(message)
        if due:
            try:
                await self._deliver(due)
            except BrokerError as error:
                log.warning(
                    "delivering delayed messages of level %d failed, retrying in %d ms: %s",
                    level,
                    DELAY_FOR_A_PERIOD_MS,
                    error.message,
                )
                return DELAY_FOR_A_PERIOD_MS
            self.offsets[level] = offset + len(due)
        return countdown if countdown is not None else 0

    async def _deliver(self, messages: list[StoredMessage]) -> None:
        batch = []
        for message in messages:
            real_topic = message.properties.get(mf.PROPERTY_REAL_TOPIC, "")
            if self.topics.get(real_topic) is None or mf.PROPERTY_REAL_QUEUE_ID not in message.properties:
                log.warning(
                    "dropping delayed message at offset %d: its topic %r no longer exists",
                    message.queue_offset,
                    real_topic,
                )
                continue
            batch.append(message_timeup(message))
        if batch:
            check_put_results(await self.executor.run(self.store.put_messages, batch))

    async def _deliver_forever(self, level: int) -> None:
        arrival = self._arrivals[level]
        while True:
            arrival.clear()
            try:
                wait_ms = await self.deliver_due(level)
            except Exception:
                log.exception("delivering delayed messages of level %d failed", level)
                wait_ms = DELAY_FOR_A_PERIOD_MS
            if wait_ms is None:
                await arrival.wait()
            elif wait_ms > 0:
                await asyncio.sleep(wait_ms / 1000)

    async def _persist_forever(self) -> None:
        while True:
            await asyncio.sleep(self.persist_interval_ms / 1000)
            try:
                await self.executor.run(write_json_atomically, self.path, self._snapshot())
            except OSError:
                log.exception("persisting %s failed", self.path)
