"""OffsetStore: the consumer group's progress per MessageQueue (spec
consumption-longpolling-offsets §14).

`update_offset` changes only the in-memory table; `persist_all` writes it out: to the
broker's consumer-offset manager (RemoteBrokerOffsetStore, clustering) or to a local JSON
file (LocalFileOffsetStore, broadcasting). `read_offset` returns NO_OFFSET (-1) when
nothing is saved and, for the broker store, OFFSET_READ_FAILED (-2) when the broker cannot
be asked.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from rmq.connector.broker_outages import BrokerOutages
from rmq.connector.client import MessageQueue, RmqClient, RmqError, RmqUnavailable
from rmq.connector.offsets import (
    NO_OFFSET,
    OFFSET_READ_FAILED,
    Positions,
    positions_from_json,
    positions_to_json,
)

if TYPE_CHECKING:
    from rmq.connector.process_queue import ProcessQueue

logger = logging.getLogger(__name__)

# LocalFileOffsetStore's directory (rocketmq.client.localOffsetStoreDir), as the Spark source's
# offsetStoreDir (README)
DEFAULT_OFFSET_STORE_DIR = "~/.rmq/offsets"

OFFSETS_FILE = "offsets.json"


class ReadOffsetType(Enum):
    READ_FROM_MEMORY = "memory"
    READ_FROM_STORE = "store"
    MEMORY_FIRST_THEN_STORE = "memory-first"


class OffsetStore(ABC):
    """The in-memory offset table shared by both stores (spec consumption-longpolling-offsets §14.1)."""

    def __init__(self) -> None:
        self._table: Positions = {}
        self._as_read: set[MessageQueue] = set()   # offsets read from the store and not moved since
        self._lock = threading.Lock()

    @abstractmethod
    def load(self) -> None:
        """Load saved progress into memory."""

    def update_offset(self, mq: MessageQueue, offset: int, increase_only: bool,
                      unless_dropped: ProcessQueue | None = None) -> None:
        """In memory only; with `increase_only` a smaller offset never moves it back; with
        `unless_dropped`, not at all once that ProcessQueue is dropped (checked under the table's
        lock, under which `reset_offset` drops it)."""
        with self._lock:
            if unless_dropped is not None and unless_dropped.dropped:
                return
            current = self._table.get(mq)
            if current is None or not increase_only or offset > current:
                self._table[mq] = offset
                self._as_read.discard(mq)

    def reset_offset(self, mq: MessageQueue, offset: int, dropped: ProcessQueue) -> None:
        """An admin's reset (RESET_CONSUMER_CLIENT_OFFSET): `dropped` is dropped and the offset set
        in one step, so no commit of what it held lands after the reset."""
        with self._lock:
            dropped.dropped = True
            self._table[mq] = offset
            self._as_read.discard(mq)

    def read_offset(self, mq: MessageQueue, read_type: ReadOffsetType) -> int:
        if read_type is not ReadOffsetType.READ_FROM_STORE:
            with self._lock:
                offset = self._table.get(mq)
            if offset is not None:
                return offset
            if read_type is ReadOffsetType.READ_FROM_MEMORY:
                return NO_OFFSET
        return self.read_offsets_from_store([mq])[mq]

    def read_offsets_from_store(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """READ_FROM_STORE of several queues at once (a rebalance adding many): the broker store
        asks each broker once per topic, not once per queue. Each offset read is kept in memory."""
        stored = self._read_from_store(list(mqs))
        with self._lock:
            for mq, offset in stored.items():
                if offset >= 0:
                    self._table[mq] = offset
                    self._as_read.add(mq)
        return stored

    def persist_all(self, mqs: Iterable[MessageQueue]) -> None:
        """Write the in-memory offsets of `mqs` (those that have one) to the store. An offset only
        read from the store is not written back: the queue's previous owner may have stored a
        later one since (a rebalance hands a queue over while its owner shuts down)."""
        with self._lock:
            offsets = {mq: self._table[mq] for mq in mqs if mq in self._table and mq not in self._as_read}
        if offsets:
            self._persist(offsets)

    def remove_offset(self, mq: MessageQueue) -> None:
        """Forget `mq` in memory (the queue went to another consumer)."""
        with self._lock:
            self._table.pop(mq, None)
            self._as_read.discard(mq)

    def tracked(self) -> set[MessageQueue]:
        with self._lock:
            return set(self._table)

    @abstractmethod
    def _read_from_store(self, mqs: list[MessageQueue]) -> dict[MessageQueue, int]:
        """The saved offset of each queue: NO_OFFSET when none, OFFSET_READ_FAILED when the
        store could not be read."""

    @abstractmethod
    def _persist(self, offsets: Positions) -> None: ...


class RemoteBrokerOffsetStore(OffsetStore):
    """Clustering: offsets live in the broker's ConsumerOffsetManager, shared by the group.
    Each queue's offset is read from its own broker, and a persist writes every reachable
    broker: an unreachable one, reported to `outages`, holds up no other broker's queues (the
    persist then raises its RmqUnavailable, which callers need not log again)."""

    def __init__(self, client: RmqClient, group: str, outages: BrokerOutages | None = None) -> None:
        super().__init__()
        self._client = client
        self._group = group
        self._outages = outages or BrokerOutages(f"consumer group {group}")

    def load(self) -> None:
        """Nothing to preload: READ_FROM_STORE asks the broker."""

    def _read_from_store(self, mqs: list[MessageQueue]) -> dict[MessageQueue, int]:
        """One QueryConsumerOffsets per broker and topic (it answers every queue of the topic)."""
        stored: dict[MessageQueue, int] = {}
        for (broker_name, topic), queues in _by_broker_and_topic(mqs).items():
            try:
                offsets = self._client.query_consumer_offsets(self._group, topic, broker_name=broker_name)
            except RmqUnavailable as error:
                self._outages.unreachable(broker_name, error)
                offsets = dict.fromkeys(queues, OFFSET_READ_FAILED)
            except RmqError as error:
                logger.warning("fetchConsumeOffsetFromBroker exception, %s of %s: %s", topic, broker_name,
                               error)
                offsets = dict.fromkeys(queues, OFFSET_READ_FAILED)
            else:
                self._outages.answered(broker_name)
            stored.update((mq, offsets.get(mq, NO_OFFSET)) for mq in queues)
        return stored

    def _persist(self, offsets: Positions) -> None:
        # The broker overwrites (ConsumerOffsetManager.commitOffset); increase-only is
        # enforced in memory, so a query restarted from an older checkpoint can move back.
        unreachable: dict[str, RmqUnavailable] = {}
        try:
            self._client.update_consumer_offsets(self._group, offsets, unreachable=unreachable)
        finally:
            self._outages.unreachable_all(unreachable)
        for broker_name in {mq.broker_name for mq in offsets} - unreachable.keys():
            self._outages.answered(broker_name)
        if unreachable:
            raise next(iter(unreachable.values()))


def _by_broker_and_topic(mqs: Iterable[MessageQueue]) -> dict[tuple[str, str], list[MessageQueue]]:
    grouped: dict[tuple[str, str], list[MessageQueue]] = {}
    for mq in mqs:
        grouped.setdefault((mq.broker_name, mq.topic), []).append(mq)
    return grouped


class LocalFileOffsetStore(OffsetStore):
    """Broadcasting: each consumer keeps its own progress in `<directory>/<group>/offsets.json`
    (same JSON form as the offset options), written atomically with a `.bak` of the
    previous version, like RocketMQ's MixAll.string2File. With `legacy_directory`, offsets saved
    there (where an earlier version kept them) are read while `directory` holds none yet."""

    def __init__(self, directory: str | os.PathLike[str], group: str,
                 legacy_directory: str | os.PathLike[str] | None = None) -> None:
        super().__init__()
        self.path = Path(directory) / group / OFFSETS_FILE
        self._legacy_path = (None if legacy_directory is None
                             else Path(legacy_directory) / group / OFFSETS_FILE)

    def load(self) -> None:
        for mq, offset in self._read_file().items():
            self.update_offset(mq, offset, increase_only=False)

    def _read_from_store(self, mqs: list[MessageQueue]) -> dict[MessageQueue, int]:
        """One read of the file for all of them."""
        saved = self._read_file()
        return {mq: saved.get(mq, NO_OFFSET) for mq in mqs}

    def _read_file(self) -> Positions:
        """The saved offsets; falls back to the `.bak` copy when the file is missing or broken,
        then to the legacy directory's."""
        paths = [self.path] if self._legacy_path is None else [self.path, self._legacy_path]
        for candidate in (c for path in paths for c in (path, path.with_name(OFFSETS_FILE + ".bak"))):
            try:
                text = candidate.read_text()
                if text.strip():
                    return positions_from_json(json.loads(text))
            except FileNotFoundError:
                continue
            except ValueError as error:   # JSONDecodeError is a ValueError
                logger.warning("ignoring unreadable offset file %s: %s", candidate, error)
        return {}

    def _persist(self, offsets: Positions) -> None:
        saved = self._read_file()
        saved.update(offsets)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(OFFSETS_FILE + ".tmp")
        temporary.write_text(json.dumps(positions_to_json(saved), indent=2))
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        if self.path.exists():
            os.replace(self.path, self.path.with_name(OFFSETS_FILE + ".bak"))
        os.replace(temporary, self.path)


def create_offset_store(
    client: RmqClient, group: str, *, broadcasting: bool, directory: str, outages: BrokerOutages | None = None
) -> OffsetStore:
    """The store the message model calls for (spec consumer-startup §2)."""
    store: OffsetStore = LocalFileOffsetStore(directory, group) if broadcasting else RemoteBrokerOffsetStore(
        client, group, outages
    )
    store.load()
    return store

