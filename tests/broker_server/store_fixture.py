"""A real MessageStore on a temporary directory for broker_server unit tests."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rmq.store import FlushDiskType, MessageStore, MessageStoreConfig


@contextmanager
def running_store(directory: Path) -> Iterator[MessageStore]:
    store = MessageStore(
        MessageStoreConfig(
            store_dir=directory,
            flush_disk_type=FlushDiskType.ASYNC,
            mapped_file_size_commit_log=1024 * 1024,
            mapped_file_size_consume_queue=20 * 1000,
            message_index_enable=False,
            max_message_size=4096,
        )
    )
    store.start()
    try:
        yield store
    finally:
        store.shutdown()


def wait_dispatched(store: MessageStore, topic: str, queue_id: int, max_offset: int) -> None:
    """Messages are pullable once the reput thread dispatched them, just after the put."""
    deadline = time.monotonic() + 5
    while store.get_max_offset_in_queue(topic, queue_id) < max_offset:
        assert time.monotonic() < deadline, f"{topic}/{queue_id} not dispatched up to {max_offset}"
        time.sleep(0.005)
