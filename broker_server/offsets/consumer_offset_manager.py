"""Consumer progress kept by the broker for clustering consumers (RocketMQ
ConsumerOffsetManager, spec consumption-longpolling-offsets §14.6): (group, topic, queue) ->
next offset to consume, persisted to `<store>/config/consumerOffset.json` in RocketMQ's
layout `{"offsetTable": {"topic@group": {"queueId": offset}}}`.

Clients add entries by committing for new (group, topic, queue) triples: every commit a client
makes (rmq.v1 UpdateConsumerOffsets and piggy-backed pull commits, RocketMQ 5 UpdateOffset, the
first pop of a queue) goes through `commit_client_offsets`, which bounds the table at `max_entries`
(BrokerConfig max_consumer_offsets) and each account's entries at `max_entries_per_account`
(max_consumer_offsets_per_account), so one account cannot fill the table for the others. Without
--acl every caller is the one ANONYMOUS account and only the total applies. Which account added
an entry is kept in memory: entries loaded at start count towards the total only. Entries of a
deleted topic are dropped with it."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.json_file import read_json, write_json_atomically
from rmq.broker_server.security.caller import ANONYMOUS
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)
TOPIC_GROUP_SEPARATOR = "@"
DEFAULT_MAX_ENTRIES = 262144
DEFAULT_MAX_ENTRIES_PER_ACCOUNT = 65536


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    queue_id: int


class ConsumerOffsetManager:
    def __init__(self, store_path: Path, max_entries: int = DEFAULT_MAX_ENTRIES,
                 max_entries_per_account: int = DEFAULT_MAX_ENTRIES_PER_ACCOUNT) -> None:
        self.path = store_path / "config" / "consumerOffset.json"
        self.max_entries = max_entries
        self.max_entries_per_account = max_entries_per_account
        self._offsets: dict[OffsetKey, int] = {}
        self._added_by: dict[OffsetKey, str] = {}    # entries a client added since start -> its account
        self._per_account: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._dirty = False
        self._listeners: list[Callable[[OffsetKey, int], None]] = []

    def add_listener(self, listener: Callable[[OffsetKey, int], None]) -> None:
        """listener(key, offset) after each stored commit, on the committing thread, holding the
        table's lock (so it must only take note: replication sends it to the slaves)."""
        self._listeners.append(listener)

    def load(self) -> None:
        content = read_json(self.path) or {}
        offsets: dict[OffsetKey, int] = {}
        try:
            for key, queues in content.get("offsetTable", {}).items():
                topic, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
                for queue_id, offset in queues.items():
                    offsets[OffsetKey(group, topic, int(queue_id))] = int(offset)
        except (AttributeError, ValueError) as error:
            raise ValueError(f"{self.path} has an unexpected layout: {error}") from error
        self._offsets = offsets

    def persist(self) -> None:
        """Write the table if it changed since the last write (called every few seconds and
        on shutdown)."""
        with self._lock:
            if not self._dirty:
                return
            table: dict[str, dict[str, int]] = {}
            for key, offset in self._offsets.items():
                table.setdefault(f"{key.topic}{TOPIC_GROUP_SEPARATOR}{key.group}", {})[str(key.queue_id)] = (
                    offset
                )
            self._dirty = False
        write_json_atomically(self.path, {"offsetTable": table})

    def commit_offset(
        self, group: str, topic: str, queue_id: int, offset: int, increase_only: bool = False
    ) -> None:
        """Store `offset`. RocketMQ's commitOffset always overwrites (a smaller offset is only
        logged); `increase_only` keeps a larger stored offset (OffsetStore.updateOffset)."""
        with self._lock:
            self._store(OffsetKey(group, topic, queue_id), offset, increase_only)

    def _store(self, key: OffsetKey, offset: int, increase_only: bool) -> None:
        """commit_offset under the lock."""
        stored = self._offsets.get(key)
        if stored is not None and offset < stored:
            if increase_only:
                return
            log.info(
                "[NOTIFYME]update consumer offset less than store. key=%s@%s, queueId=%d, "
                "requestOffset=%d, storeOffset=%d",
                key.topic,
                key.group,
                key.queue_id,
                offset,
                stored,
            )
        self._offsets[key] = offset
        self._dirty = True
        for listener in self._listeners:
            listener(key, offset)

    def commit_client_offsets(self, account: str, offsets: Mapping[OffsetKey, int],
                              increase_only: bool = False) -> None:
        """Store a client's commits, all or none: refused (LIMIT_EXCEEDED) when their new entries
        would pass `max_entries`, or `account`'s share of them."""
        with self._lock:
            new = [key for key in offsets if key not in self._offsets]
            self._check_room(account, len(new))
            for key in new:
                self._added_by[key] = account
            self._per_account[account] += len(new)
            for key, offset in offsets.items():
                self._store(key, offset, increase_only)

    def _check_room(self, account: str, new: int) -> None:
        if not new:
            return
        if len(self._offsets) + new > self.max_entries:
            raise BrokerError(rmq_pb2.LIMIT_EXCEEDED,
                               f"this broker already stores {len(self._offsets)} consumer offsets; "
                               f"{new} more would pass {self.max_entries} (max_consumer_offsets)")
        if account != ANONYMOUS and self._per_account[account] + new > self.max_entries_per_account:
            raise BrokerError(rmq_pb2.LIMIT_EXCEEDED,
                               f"this account already added {self._per_account[account]} consumer offsets; "
                               f"{new} more would pass {self.max_entries_per_account} "
                               f"(max_consumer_offsets_per_account)")

    def size(self) -> int:
        with self._lock:
            return len(self._offsets)

    def query_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        return self._offsets.get(OffsetKey(group, topic, queue_id))

    def query_offsets(self, group: str, topic: str = "") -> dict[OffsetKey, int]:
        """The group's offsets, for one topic or (topic empty) every topic, sorted."""
        with self._lock:
            found = {
                key: offset
                for key, offset in self._offsets.items()
                if key.group == group and (not topic or key.topic == topic)
            }
        return dict(sorted(found.items(), key=lambda item: (item[0].topic, item[0].queue_id)))

    def all_offsets(self) -> dict[OffsetKey, int]:
        """Every group's committed offsets (a copy)."""
        with self._lock:
            return dict(self._offsets)

    def groups(self) -> set[str]:
        """The groups with a committed offset here."""
        with self._lock:
            return {key.group for key in self._offsets}

    def added_by(self) -> dict[OffsetKey, str]:
        """The account that added each entry since start (a copy; loaded entries are absent)."""
        with self._lock:
            return dict(self._added_by)

    def remove_offset(self, group: str, topic: str, queue_id: int) -> None:
        with self._lock:
            self._forget([OffsetKey(group, topic, queue_id)])

    def remove_topic(self, topic: str) -> None:
        """Forget every group's offsets of a deleted topic."""
        with self._lock:
            self._forget([key for key in self._offsets if key.topic == topic])

    def _forget(self, keys: list[OffsetKey]) -> None:
        """Under the lock: drop entries, giving their room back to the accounts that added them."""
        for key in keys:
            if self._offsets.pop(key, None) is None:
                continue
            self._dirty = True
            account = self._added_by.pop(key, None)
            if account is not None:
                self._per_account[account] -= 1
