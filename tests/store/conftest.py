"""Fixtures: small stores (KiB-sized files) in temporary directories."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rmq.store import FlushDiskType, MessageStore, MessageStoreConfig, MessageToStore
from rmq.store.commit_log import CommitLog, EncodedBatch
from rmq.store.message_batch import MessageBatch


def small_config(store_dir: Path, **overrides) -> MessageStoreConfig:
    values = dict(
        store_dir=store_dir,
        flush_disk_type=FlushDiskType.SYNC,
        mapped_file_size_commit_log=8192,
        mapped_file_size_consume_queue=20 * 64,
        max_hash_slot_num=64,
        max_index_num=512,
        delete_commit_log_files_interval_ms=0,
        clean_resource_interval_ms=3_600_000,
    )
    values.update(overrides)
    return MessageStoreConfig(**values)


def message(topic: str = "TopicTest", queue_id: int = 0, body: bytes = b"hello", **properties: str
            ) -> MessageToStore:
    return MessageToStore(topic=topic, queue_id=queue_id, body=body, properties=properties,
                          born_timestamp=1, born_host=bytes([127, 0, 0, 1]) + (1234).to_bytes(4, "big"))


def encode(commit_log: CommitLog, *messages: MessageToStore) -> EncodedBatch:
    encoded = commit_log.encode(MessageBatch.from_messages(messages))
    assert isinstance(encoded, EncodedBatch), encoded
    return encoded


def wait_dispatched(store: MessageStore, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while store.dispatch_behind_bytes() > 0:
        assert time.monotonic() < deadline, "dispatch did not catch up"
        time.sleep(0.001)


@pytest.fixture
def open_store(tmp_path: Path) -> Iterator[Callable[..., MessageStore]]:
    """open_store(**config overrides) -> a started store; all are shut down at the end."""
    opened: list[MessageStore] = []

    def open_(**overrides) -> MessageStore:
        store = MessageStore(small_config(tmp_path / "store", **overrides))
        store.start()
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.shutdown()
