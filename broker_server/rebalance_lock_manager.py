"""Broker-side queue locks for ordered consumption (RocketMQ RebalanceLockManager, spec
consumer-pull-rebalance §2.11, TV-22): per group, MessageQueue -> LockEntry(client id, last
update). A lock not refreshed within the max live time (60 s) is free for another client;
the holder renews it by locking again."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rmq.message_queue import MessageQueue


@dataclass
class LockEntry:
    client_id: str
    last_update_ms: int


class RebalanceLockManager:
    def __init__(self, max_live_time_ms: int = 60000, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_live_time_ms = max_live_time_ms
        self._clock = clock
        self._table: dict[str, dict[MessageQueue, LockEntry]] = {}
        self._lock = threading.Lock()

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """Lock (or renew) every queue that is free, expired, or already held by `client_id`;
        returns the queues `client_id` now holds."""
        now = int(self._clock() * 1000)
        locked = set()
        with self._lock:
            entries = self._table.setdefault(group, {})
            for mq in mqs:
                entry = entries.get(mq)
                if entry is None or entry.client_id == client_id or self._expired(entry, now):
                    entries[mq] = LockEntry(client_id, now)
                    locked.add(mq)
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues `client_id` holds; locks held by others are left alone."""
        with self._lock:
            entries = self._table.get(group, {})
            for mq in mqs:
                entry = entries.get(mq)
                if entry is not None and entry.client_id == client_id:
                    del entries[mq]
            if not entries:
                self._table.pop(group, None)

    def _expired(self, entry: LockEntry, now_ms: int) -> bool:
        return now_ms - entry.last_update_ms > self.max_live_time_ms
