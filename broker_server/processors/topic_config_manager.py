"""The broker's topics (RocketMQ TopicConfigManager): name, read/write queue counts and
permission, persisted to `<store>/config/topics.json` plus the journal `topics.journal`.

Each change is appended to the journal as one JSON line (`{"put": {...config}}` or
`{"delete": name}`) and fsynced before it is acknowledged: O(1) per change, where rewriting
the whole table made creating n topics O(n^2) (2,000 topics rewrote ~300 MB). Loading replays
the journal over the snapshot, then compacts (snapshot written atomically, journal emptied); so
does a journal longer than the table (amortized O(1)). Every record sets or removes one topic
whole, so replaying a journal already folded into the snapshot (a crash between the two steps of
a compaction) changes nothing. Only the last line can be torn (each append waits for the previous
one's fsync): bytes after the last newline were never acknowledged and are dropped.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rmq.broker_server.errors import BrokerError, illegal_argument
from rmq.broker_server.json_file import read_json, write_json_atomically
from rmq.broker_server.processors.names import check_topic_name, check_user_topic_name
from rmq.store.private_files import append_durably, make_dirs, open_private
from rmq.topic_config import PERM_INHERIT, PERM_READ, PERM_WRITE, TopicConfig
from rmq.v1 import rmq_pb2

MAX_QUEUE_NUMS = 1024
JOURNAL_COMPACT_MIN_RECORDS = 1024   # a journal is compacted once longer than this and the table

log = logging.getLogger(__name__)


def check_topic_config(config: TopicConfig) -> None:
    """Refuse a config no topic may have: bad name (TOPIC_ILLEGAL), queue counts outside
    1..1024 or a permission without read or write (ILLEGAL_ARGUMENT)."""
    check_user_topic_name(config.topic_name)
    for name in ("read_queue_nums", "write_queue_nums"):
        value = getattr(config, name)
        if not 1 <= value <= MAX_QUEUE_NUMS:
            raise illegal_argument(f"{name} must be between 1 and {MAX_QUEUE_NUMS}, not {value}")
    if config.perm & ~(PERM_READ | PERM_WRITE | PERM_INHERIT) or not config.perm & (PERM_READ | PERM_WRITE):
        raise illegal_argument(
            f"perm must combine PERM_READ ({PERM_READ}) and/or PERM_WRITE ({PERM_WRITE}), not {config.perm}"
        )


class TopicConfigManager:
    def __init__(self, store_path: Path, auto_create: bool = False, default_queue_nums: int = 8) -> None:
        self.path = store_path / "config" / "topics.json"
        self.journal_path = self.path.with_name("topics.journal")
        self.auto_create = auto_create
        self.default_queue_nums = default_queue_nums
        self._topics: dict[str, TopicConfig] = {}
        self._journal_records = -1     # records in the journal; -1 until a compaction created it
        self._lock = threading.Lock()
        self.version = 0               # one more per change (what a slave acknowledges having)
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, listener: Callable[[], None]) -> None:
        """listener() after each change, on the changing thread, holding the table's lock (so
        it must only take note, e.g. wake a replication stream)."""
        self._listeners.append(listener)

    def _changed(self) -> None:
        self.version += 1
        for listener in self._listeners:
            listener()

    def load(self) -> None:
        """The snapshot with the journal replayed over it, then compacted (ValueError naming the
        file when either is corrupt: the broker refuses to start rather than forget topics)."""
        content = read_json(self.path) or {}
        try:
            topics = {
                name: TopicConfig(**fields) for name, fields in content.get("topicConfigTable", {}).items()
            }
        except TypeError as error:
            raise ValueError(f"{self.path} has an unexpected layout: {error}") from error
        for number, record in enumerate(self._read_journal(), 1):
            try:
                _apply(topics, record)
            except (TypeError, ValueError) as error:
                raise ValueError(
                    f"{self.journal_path} line {number} is not a topic record: {error}") from error
        with self._lock:
            self._topics = topics
            self._compact()

    def _read_journal(self) -> list[dict[str, Any]]:
        try:
            data = self.journal_path.read_bytes()
        except FileNotFoundError:
            return []
        complete = data[:data.rfind(b"\n") + 1]     # a torn last line was never acknowledged
        records = []
        for number, line in enumerate(complete.splitlines(), 1):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ValueError(f"{self.journal_path} line {number} is not valid JSON: {error}") from error
        return records

    def _record(self, record: dict[str, Any]) -> None:
        """Append `record` to the journal and fsync it (under `_lock`, before the table changes);
        a failed write is cut off again, so no half line precedes the next record."""
        if self._journal_records < 0:
            self._compact()
        append_durably(self.journal_path, (json.dumps(record, sort_keys=True) + "\n").encode())
        self._journal_records += 1

    def _compact(self) -> None:
        """Write the table as the snapshot, then empty the journal (under `_lock`). The journal
        exists before the snapshot's write, which fsyncs the directory: its entry is durable."""
        make_dirs(self.path.parent)
        fd = open_private(self.journal_path, os.O_WRONLY | os.O_CREAT)
        try:
            table = {name: asdict(config) for name, config in self._topics.items()}
            write_json_atomically(self.path, {"topicConfigTable": table})
            os.ftruncate(fd, 0)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._journal_records = 0

    def _put(self, config: TopicConfig) -> None:
        """Journal then apply `config` (under `_lock`); compact once the journal outgrows the table."""
        self._record({"put": asdict(config)})
        self._topics[config.topic_name] = config
        self._changed()
        self._compact_when_long()

    def _compact_when_long(self) -> None:
        """The change is durable in the journal already: a failed compaction is retried later."""
        if self._journal_records > max(JOURNAL_COMPACT_MIN_RECORDS, len(self._topics)):
            try:
                self._compact()
            except OSError as error:
                log.warning("cannot compact %s into %s, retried at the next change: %s",
                            self.journal_path, self.path, error)

    def create(self, config: TopicConfig) -> None:
        check_topic_config(config)
        with self._lock:
            existing = self._topics.get(config.topic_name)
            if existing is not None:
                raise BrokerError(
                    rmq_pb2.TOPIC_ALREADY_EXISTS,
                    f"topic {config.topic_name!r} already exists with {existing.read_queue_nums} read / "
                    f"{existing.write_queue_nums} write queues",
                )
            self._put(config)

    def update(self, config: TopicConfig) -> None:
        """Grow an existing topic's queue counts and/or change its perm (RocketMQ updateTopic).
        A smaller queue count is refused (ILLEGAL_ARGUMENT): its queues may hold messages."""
        check_topic_config(config)
        with self._lock:
            existing = self._topics.get(config.topic_name)
            if existing is None:
                raise self._not_exist(config.topic_name)
            for name in ("read_queue_nums", "write_queue_nums"):
                before, after = getattr(existing, name), getattr(config, name)
                if after < before:
                    raise illegal_argument(
                        f"topic {config.topic_name!r} cannot shrink from {before} to {after} {name}: "
                        f"queues holding messages cannot be removed"
                    )
            self._put(config)

    def delete(self, topic: str) -> TopicConfig:
        with self._lock:
            config = self._topics.get(topic)
            if config is None:
                raise self._not_exist(topic)
            self._record({"delete": topic})
            del self._topics[topic]
            self._changed()
            self._compact_when_long()
        return config

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def require(self, topic: str) -> TopicConfig:
        """The topic's config; an unknown topic is refused (TOPIC_NOT_EXIST), or created with
        the default queue count when auto-creation is on (autoCreateTopicEnable)."""
        config = self._topics.get(topic)
        if config is not None:
            return config
        check_topic_name(topic)
        if not self.auto_create:
            raise self._not_exist(topic)
        config = TopicConfig(topic, self.default_queue_nums, self.default_queue_nums)
        try:
            self.create(config)
        except BrokerError as error:
            if error.code != rmq_pb2.TOPIC_ALREADY_EXISTS:
                raise
        return self._topics[topic]

    def create_in_send_message_back(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        """The retry or dead-letter topic of a group, created with `queue_nums` queues and
        `perm` on first use (createTopicInSendMessageBackMethod); an existing one is kept."""
        check_topic_name(topic)
        with self._lock:
            config = self._topics.get(topic)
            if config is not None:
                return config
            config = TopicConfig(topic, queue_nums, queue_nums, perm)
            self._put(config)
        return config

    def all(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda config: config.topic_name)

    @staticmethod
    def _not_exist(topic: str) -> BrokerError:
        return BrokerError(rmq_pb2.TOPIC_NOT_EXIST, f"topic {topic!r} does not exist on this broker")


def _apply(topics: dict[str, TopicConfig], record: dict[str, Any]) -> None:
    """Replay one journal record onto `topics` (TypeError/ValueError when it is not one)."""
    if not isinstance(record, dict) or len(record) != 1:
        raise ValueError(f"expected one of put/delete, not {record!r}")
    if "put" in record:
        config = TopicConfig(**record["put"])
        topics[config.topic_name] = config
    elif "delete" in record:
        topics.pop(record["delete"], None)
    else:
        raise ValueError(f"expected one of put/delete, not {record!r}")
