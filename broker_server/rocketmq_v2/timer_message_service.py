"""Delivery at a timestamp for DELAY messages (RocketMQ 5 TimerMessageStore; spec
rocketmq-v2-protocol.md §3.7): a message due later waits in queue 0 of `rmq_sys_wheel_timer`
with its real topic and queue in properties (REAL_TOPIC / REAL_QID, like a delay-level message)
and its delivery time (TIMER_DELIVER_MS); at that time it is stored again in its real queue,
where it becomes consumable through either protocol.

The waiting messages are kept in memory as a heap of (delivery time, timer-queue offset),
rebuilt on start from `<store>/config/timerOffset.json` (the smallest offset not yet delivered),
so none is lost across a restart; one delivered just before a crash may be delivered twice
(at least once, as RocketMQ's timer)."""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from pathlib import Path

from rmq.broker_server.background_tasks import cancel_all
from rmq.broker_server.json_file import read_json, write_json_atomically
from rmq.broker_server.processors.names import SYSTEM_TOPIC_PREFIX
from rmq.broker_server.processors.put_status import check_put_status
from rmq.broker_server.processors.schedule_message_service import message_timeup
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.rocketmq_v2.properties import PROPERTY_TIMER_DELIVER_MS
from rmq.store import MessageStore
from rmq.stored_message import decode_record, decode_records

log = logging.getLogger(__name__)
TIMER_TOPIC = SYSTEM_TOPIC_PREFIX + "wheel_timer"
TIMER_GROUP = SYSTEM_TOPIC_PREFIX + "timer"
SCAN_BATCH = 256
RETRY_AFTER_FAILURE_S = 1.0


class TimerMessageService:
    def __init__(self, store: MessageStore, topics: TopicConfigManager, executor: StoreExecutor,
                 store_path: Path, persist_interval_s: float = 5.0) -> None:
        self.store = store
        self.topics = topics
        self.executor = executor
        self.path = store_path / "config" / "timerOffset.json"
        self.persist_interval_s = persist_interval_s
        self.scan_offset = 0               # the next timer-queue offset to read into the heap
        self._heap: list[tuple[int, int]] = []
        self._arrival = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def load(self) -> None:
        content = read_json(self.path) or {}
        self.scan_offset = int(content.get("committedOffset", 0))

    def committed_offset(self) -> int:
        """The smallest timer-queue offset whose message is not delivered yet."""
        return min((offset for _, offset in self._heap), default=self.scan_offset)

    def persist(self) -> None:
        write_json_atomically(self.path, {"committedOffset": self.committed_offset()})

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run()), loop.create_task(self._persist_forever())]

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        self.persist()

    def wake(self) -> None:
        """A message was put into the timer queue."""
        self._arrival.set()

    async def _run(self) -> None:
        while True:
            self._arrival.clear()
            try:
                await self._scan()
                await self._deliver_due()
            except Exception:
                log.exception("timer delivery failed; retrying")
                await asyncio.sleep(RETRY_AFTER_FAILURE_S)
                continue
            wait = None
            if self._heap:
                wait = max(self._heap[0][0] - time.time() * 1000, 0) / 1000
            try:
                await asyncio.wait_for(self._arrival.wait(), wait)
            except TimeoutError:
                pass

    async def _scan(self) -> None:
        """Read newly stored timer messages into the heap."""
        while True:
            result = await self.executor.run(self.store.get_message, TIMER_GROUP, TIMER_TOPIC, 0,
                                             self.scan_offset, SCAN_BATCH)
            if not result.message_count:
                if result.next_begin_offset > self.scan_offset:   # skipped past removed entries
                    self.scan_offset = result.next_begin_offset
                return
            for message in decode_records(bytes(result.buffer), result.sizes):
                deliver_ms = int(message.properties.get(PROPERTY_TIMER_DELIVER_MS, "0"))
                heapq.heappush(self._heap, (deliver_ms, message.queue_offset))
            self.scan_offset = result.next_begin_offset

    async def _deliver_due(self) -> None:
        now = time.time() * 1000
        while self._heap and self._heap[0][0] <= now:
            _, offset = self._heap[0]
            result = await self.executor.run(self.store.get_message, TIMER_GROUP, TIMER_TOPIC, 0, offset, 1)
            if result.message_count:
                message = decode_record(bytes(result.buffer[: int(result.sizes[0])]))
                due = message_timeup(message)
                if self.topics.get(due.topic) is None:
                    log.warning("dropping timer message at offset %d: topic %r no longer exists", offset,
                                due.topic)
                else:
                    check_put_status((await self.executor.run(self.store.put_message, due)).status)
            heapq.heappop(self._heap)

    async def _persist_forever(self) -> None:
        while True:
            await asyncio.sleep(self.persist_interval_s)
            try:
                await self.executor.run(self.persist)
            except OSError:
                log.exception("persisting %s failed", self.path)
