"""Broker-side queue locks for ordered consumption (RocketMQ RebalanceLockManager, spec
consumer-pull-rebalance §2.11, TV-22): per group, MessageQueue -> LockEntry(client id, last
update). A lock not refreshed within the max live time (60 s) is free for another client;
the holder renews it by locking again.

Bounded: expired locks that nobody unlocks are dropped by `purge_expired` (the broker's
periodic client scan), and the table holds at most `max_locks` entries (BrokerConfig
max_queue_locks): a batch that would pass it is refused with LIMIT_EXCEEDED, nothing locked.

Two additions to RocketMQ's table, both so that no two consumers ever process one queue at
the same time and a dead one does not stall it (issue 13): a client that leaves the group
(its membership watch stream ended with its connection, it unregistered, or it expired)
loses its locks at once (`unlock_clients`); and with a `path` the holders are kept in a JSON
file (written when a holder changes, not on renewals), so a restarted broker still knows
them: each restored lock counts as renewed at the restart, so its holder keeps it while it
reconnects and renews, and a holder that died meanwhile loses it after the max live time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.json_file import read_json, write_json_atomically
from rmq.message_queue import MessageQueue
from rmq.v1 import rmq_pb2

LOCKS_FILE = "rebalance_locks.json"

DEFAULT_MAX_LOCKS = 65536


@dataclass
class LockEntry:
    client_id: str
    last_update_ms: int


class RebalanceLockManager:
    def __init__(self, max_live_time_ms: int = 60000, clock: Callable[[], float] = time.monotonic,
                 max_locks: int = DEFAULT_MAX_LOCKS, path: Path | None = None) -> None:
        self.max_live_time_ms = max_live_time_ms
        self.max_locks = max_locks
        self._clock = clock
        self._table: dict[str, dict[MessageQueue, LockEntry]] = {}
        self._count = 0
        self._lock = threading.Lock()
        self._path = path
        if path is not None:
            self._load(path)

    def _load(self, path: Path) -> None:
        now = int(self._clock() * 1000)
        for group, holders in (read_json(path) or {}).items():
            entries = {MessageQueue(topic, broker, queue_id): LockEntry(client_id, now)
                       for topic, broker, queue_id, client_id in holders[:self.max_locks - self._count]}
            if entries:
                self._table[group] = entries
                self._count += len(entries)

    def _persist(self) -> None:
        """Write the holders (the lock held, after a holder changed)."""
        if self._path is not None:
            write_json_atomically(self._path, {
                group: [[mq.topic, mq.broker_name, mq.queue_id, entry.client_id]
                        for mq, entry in sorted(entries.items())]
                for group, entries in self._table.items()})

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
                raise BrokerError(rmq_pb2.LIMIT_EXCEEDED,
                                   f"this broker already holds {self._count} queue locks; {added} more would "
                                   f"pass {self.max_locks} (max_queue_locks)")
            entries = self._table.setdefault(group, entries)
            holder_changed = False
            for mq in mqs:
                entry = entries.get(mq)
                if entry is None or entry.client_id == client_id or self._expired(entry, now):
                    holder_changed = holder_changed or entry is None or entry.client_id != client_id
                    entries[mq] = LockEntry(client_id, now)
                    locked.add(mq)
            self._count += added
            if not entries:
                del self._table[group]
            if holder_changed:
                self._persist()
        return locked

    def unlock_batch(self, group: str, mqs: Iterable[MessageQueue], client_id: str) -> None:
        """Release the queues `client_id` holds; locks held by others are left alone."""
        mq_set = set(mqs)
        self._remove(group, lambda mq, entry: mq in mq_set and entry.client_id == client_id)

    def unlock_clients(self, group: str, client_ids: Iterable[str]) -> None:
        """Release every lock the clients hold in `group` (they left it: ConsumerManager listener)."""
        leaving = set(client_ids)
        if leaving:
            self._remove(group, lambda mq, entry: entry.client_id in leaving)

    def holder(self, group: str, mq: MessageQueue) -> str | None:
        """The client holding `mq`'s unexpired lock, if any."""
        with self._lock:
            entry = self._table.get(group, {}).get(mq)
            if entry is None or self._expired(entry, int(self._clock() * 1000)):
                return None
            return entry.client_id

    def _remove(self, group: str, released: Callable[[MessageQueue, LockEntry], bool]) -> None:
        with self._lock:
            entries = self._table.get(group, {})
            gone = [mq for mq, entry in entries.items() if released(mq, entry)]
            for mq in gone:
                del entries[mq]
            self._count -= len(gone)
            if not entries:
                self._table.pop(group, None)
            if gone:
                self._persist()

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
            if purged:
                self._persist()
        return purged

    def size(self) -> int:
        """Locks in the table, expired ones not yet purged included."""
        with self._lock:
            return self._count

    def _expired(self, entry: LockEntry, now_ms: int) -> bool:
        return now_ms - entry.last_update_ms > self.max_live_time_ms
