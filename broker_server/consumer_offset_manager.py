"""Consumer progress kept by the broker for clustering consumers (RocketMQ
ConsumerOffsetManager, spec consumption-longpolling-offsets §14.6): (group, topic, queue) ->
next offset to consume, persisted to `<store>/config/consumerOffset.json` in RocketMQ's
layout `{"offsetTable": {"topic@group": {"queueId": offset}}}`.

Clients add entries by committing for new (group, topic, queue) triples; `check_room` bounds
them at `max_entries` (BrokerConfig max_consumer_offsets) before a client's commit is stored.
Entries of a deleted topic are dropped with it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rmq.broker_server.json_file import read_json, write_json_atomically
from rmq.broker_server.status import RequestError, rmq_pb2

log = logging.getLogger(__name__)
TOPIC_GROUP_SEPARATOR = "@"
DEFAULT_MAX_ENTRIES = 262144


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    queue_id: int


class ConsumerOffsetManager:
    def __init__(self, store_path: Path, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.path = store_path / "config" / "consumerOffset.json"
        self.max_entries = max_entries
        self._offsets: dict[OffsetKey, int] = {}
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
        key = OffsetKey(group, topic, queue_id)
        with self._lock:
            stored = self._offsets.get(key)
            if stored is not None and offset < stored:
                if increase_only:
                    return
                log.info(
                    "[NOTIFYME]update consumer offset less than store. key=%s@%s, queueId=%d, "
                    "requestOffset=%d, storeOffset=%d",
                    topic,
                    group,
                    queue_id,
                    offset,
                    stored,
                )
            self._offsets[key] = offset
            self._dirty = True
            for listener in self._listeners:
                listener(key, offset)

    def check_room(self, keys: list[OffsetKey]) -> None:
        """Refuse (LIMIT_EXCEEDED) commits whose new entries would pass `max_entries`."""
        with self._lock:
            new = len({key for key in keys if key not in self._offsets})
            if new and len(self._offsets) + new > self.max_entries:
                raise RequestError(rmq_pb2.LIMIT_EXCEEDED,
                                   f"this broker already stores {len(self._offsets)} consumer offsets; "
                                   f"{new} more would pass {self.max_entries} (max_consumer_offsets)")

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

    def remove_offset(self, group: str, topic: str, queue_id: int) -> None:
        with self._lock:
            if self._offsets.pop(OffsetKey(group, topic, queue_id), None) is not None:
                self._dirty = True

    def remove_topic(self, topic: str) -> None:
        """Forget every group's offsets of a deleted topic."""
        with self._lock:
            keys = [key for key in self._offsets if key.topic == topic]
            for key in keys:
                del self._offsets[key]
            self._dirty = self._dirty or bool(keys)
