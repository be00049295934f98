"""Broker-side queue locks for ordered consumption (RocketMQ RebalanceLockManager, spec
consumer-pull-rebalance §2.11, TV-22): per group, MessageQueue -> LockEntry(client id, last
update). A lock not refreshed within the max live time (60 s) is free for another client;
the holder renews it by locking again.

Bounded: expired locks that nobody unlocks are dropped by `purge_expired` (the broker's
periodic client scan), and the table holds at most `max_locks` entries (BrokerConfig
max_queue_locks): a batch that would pass it is refused with LIMIT_EXCEEDED, nothing locked."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rmq.broker_server.status import RequestError, rmq_pb2
from rmq.message_queue import MessageQueue

DEFAULT_MAX_LOCKS = 65536


@dataclass
class LockEntry:
    client_id: str
    last_update_ms: int


class RebalanceLockManager:
    def __init__(self, max_live_time_ms: int = 60000, clock: Callable[[], float] = time.monotonic,
                 max_locks: int = DEFAULT_MAX_LOCKS) -> None:
        self.max_live_time_ms = max_live_time_ms
        self.max_locks = max_locks
        self._clock = clock
        self._table: dict[str, dict[MessageQueue, LockEntry]] = {}
        self._count = 0
        self._lock = threading.Lock()

    def try_lock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> set[MessageQueue]:
        """Lock (or renew) every queue that is free, expired, or already held by `client_id`;
        returns the queues `client_id` now holds. LIMIT_EXCEEDED when the new entries would
        pass `max_locks`."""
        now = int(self._clock() * 1000)
        mqs = list(mqs)
        locked = set()
        with self._lock:
            entries = self._table.get(group, {})
            added = len({mq for mq in mqs if mq not in entries})
            if added and self._count + added > self.max_locks:
                raise RequestError(rmq_pb2.LIMIT_EXCEEDED,
                                   f"this broker already holds {self._count} queue locks; {added} more would "
                                   f"pass {self.max_locks} (max_queue_locks)")
            entries = self._table.setdefault(group, entries)
            for mq in mqs:
                entry = entries.get(mq)
                if entry is None or entry.client_id == client_id or self._expired(entry, now):
                    entries[mq] = LockEntry(client_id, now)
                    locked.add(mq)
            self._count += added
            if not entries:
                del self._table[group]
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues `client_id` holds; locks held by others are left alone."""
        with self._lock:
            entries = self._table.get(group, {})
            for mq in mqs:
                entry = entries.get(mq)
                if entry is not None and entry.client_id == client_id:
                    del entries[mq]
                    self._count -= 1
            if not entries:
                self._table.pop(group, None)

    def purge_expired(self) -> int:
        """Drop every expired lock; returns how many."""
        now = int(self._clock() * 1000)
        purged = 0
        with self._lock:
            for group, entries in list(self._table.items()):
                for mq in [mq for mq, entry in entries.items() if self._expired(entry, now)]:
                    del entries[mq]
                    purged += 1
                if not entries:
                    del self._table[group]
            self._count -= purged
        return purged

    def size(self) -> int:
        """Locks in the table, expired ones not yet purged included."""
        with self._lock:
            return self._count

    def _expired(self, entry: LockEntry, now_ms: int) -> bool:
        return now_ms - entry.last_update_ms > self.max_live_time_ms
