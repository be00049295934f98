"""SYNC group commit and ASYNC interval flush (spec store §10; TV13, TV14)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from rmq.store import FlushDiskType, PutMessageStatus
from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.flush import GroupCommitService, thorough_least_pages
from rmq.store.mapped_file_queue import MappedFileQueue
from tests.store.conftest import message, wait_dispatched


class SyncRecorder:
    """Wraps os.fdatasync (what MappedFile.flush calls) and remembers, per file (the path its
    descriptor is open on), the furthest position of the CommitLog file whose bytes had been
    written when a sync of it began."""

    def __init__(self, store) -> None:
        self.queue = store.commit_log.mapped_file_queue
        self.synced_up_to: dict[str, int] = {}
        self._fdatasync = os.fdatasync

    def __call__(self, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        written = max((m.wrote_position for m in self.queue.files if str(m.path) == path), default=0)
        self._fdatasync(fd)
        self.synced_up_to[path] = max(self.synced_up_to.get(path, 0), written)

    def covered(self, result, body: bytes) -> bool:
        """Whether a sync that began after the put's record was written has finished."""
        mapped = self.queue.find_mapped_file_by_offset(result.physical_offset)
        end = result.physical_offset - mapped.file_from_offset + 91 + 9 + len(body)   # header, "TopicTest"
        return self.synced_up_to.get(str(mapped.path), 0) >= end


@pytest.fixture
def sync_recorder(open_store, monkeypatch: pytest.MonkeyPatch):
    """open_store(**overrides) -> (store, recorder) with the store's fdatasync calls recorded."""
    def open_recorded(**overrides):
        store = open_store(**overrides)
        recorder = SyncRecorder(store)
        monkeypatch.setattr(os, "fdatasync", recorder)
        return store, recorder

    return open_recorded


def test_sync_put_returns_only_after_a_sync_covered_its_bytes(sync_recorder) -> None:
    """White box (spec store §10.1): when a SYNC put returns, its record's bytes were synced to
    disk (fdatasync), not only counted as flushed. Runs anywhere; the LazyFS power-loss test
    (integration_tests/reliability/test_power_loss.py) proves the same end to end where FUSE mounts."""
    store, recorder = sync_recorder(flush_disk_type=FlushDiskType.SYNC)
    for n in range(40):      # 8 KiB files: the records span several files
        body = b"%d" % n * 150
        result = store.put_message(message(body=body))
        assert result.status is PutMessageStatus.PUT_OK
        assert recorder.covered(result, body), f"put {n} returned before a sync of its record"


def test_async_put_returns_before_its_sync(sync_recorder) -> None:
    """The control for the test above: the recording does see an ASYNC put return unsynced."""
    store, recorder = sync_recorder(flush_disk_type=FlushDiskType.ASYNC, flush_interval_commit_log_ms=60_000)
    result = store.put_message(message(body=b"late"))
    assert not recorder.covered(result, b"late")


def test_sync_put_returns_after_its_flush(open_store) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC)
    queue = store.commit_log.mapped_file_queue
    for _ in range(20):
        result = store.put_message(message(body=b"x" * 300))
        assert result.status is PutMessageStatus.PUT_OK
        assert queue.flushed_where >= result.physical_offset + 300 + 91 + 9


def test_sync_concurrent_putters_share_flushes(open_store) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC, mapped_file_size_commit_log=65536)
    queue = store.commit_log.mapped_file_queue
    failures: list[str] = []

    def putter(queue_id: int) -> None:
        for _ in range(40):
            result = store.put_messages([message(queue_id=queue_id), message(queue_id=queue_id)])[-1]
            if not result.ok or queue.flushed_where < result.physical_offset + 105:
                failures.append(f"{queue_id}: {result}")

    threads = [threading.Thread(target=putter, args=(q,)) for q in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    wait_dispatched(store)
    assert [store.get_max_offset_in_queue("TopicTest", q) for q in range(4)] == [80] * 4


def test_tv13_group_commit_request(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, 4096)
    service = GroupCommitService(queue, StoreCheckpoint(tmp_path / "cp"))   # thread not started
    mapped = queue.create_file(0)
    mapped.wrote_position = 1000
    mapped.store_timestamp = 77
    mapped.append(b"r" * 105)
    assert not service.wait_for_flush(1105, timeout_ms=20)    # nobody flushes: FLUSH_DISK_TIMEOUT
    service.do_commit()
    assert queue.flushed_where == 1105 and service.checkpoint.physic_msg_timestamp == 77
    assert service.wait_for_flush(1105, timeout_ms=0)
    queue.close()


def test_flush_disk_timeout_keeps_the_message(open_store) -> None:
    store = open_store(flush_disk_type=FlushDiskType.SYNC, sync_flush_timeout_ms=50)
    store._group_commit.shutdown()   # the flush thread is stuck: no flush within the timeout
    result = store.put_message(message(body=b"kept"))
    assert result.status is PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert result.queue_offset == 0 and result.msg_id
    wait_dispatched(store)
    assert store.get_message("g", "TopicTest", 0, 0, 1).message_count == 1


def test_async_put_returns_before_flush_then_flushes(open_store) -> None:
    store = open_store(flush_disk_type=FlushDiskType.ASYNC, flush_interval_commit_log_ms=20,
                       flush_commit_log_least_pages=0)
    queue = store.commit_log.mapped_file_queue
    result = store.put_message(message())
    assert result.ok
    deadline = time.monotonic() + 5
    while queue.flushed_where < result.physical_offset + 105:
        assert time.monotonic() < deadline
        time.sleep(0.005)


def test_tv14_thorough_interval() -> None:
    assert thorough_least_pages(200, 0, 200, 4) == (0, 200)
    assert thorough_least_pages(399, 200, 200, 4) == (4, 200)
    assert thorough_least_pages(400, 200, 200, 4) == (0, 400)
