"""Expired-file deletion, disk-full and write-failure handling (spec store §11; TV15, TV16)."""

from __future__ import annotations

import os
import resource
import signal
import time
from pathlib import Path

import pytest

from rmq.store import GetMessageStatus, PutMessageStatus
from rmq.store.mapped_file_queue import MappedFileQueue
from rmq.store.retention import decide_disk_space, is_time_to_delete
from tests.store.conftest import message, small_config, wait_dispatched
from tests.store.test_get_message import BODY_700, queue_offsets

HOUR = 3600


def age(path: Path, seconds: float) -> None:
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


def test_tv15_delete_stops_at_first_unexpired_file(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, 1024)
    for index, hours_old in enumerate([80, 80, 1, 80, 0]):
        age(queue.create_file(index * 1024).path, hours_old * HOUR)
    expired_time = 72 * HOUR * 1000
    assert expired_time == 259200000
    assert queue.delete_expired_file_by_time(expired_time, 0, 1000, clean_immediately=False) == 2
    assert [f.file_from_offset for f in queue.files] == [2048, 3072, 4096]
    queue.close()


def test_tv15_at_most_ten_per_run_never_the_last(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, 1024)
    for index in range(16):
        age(queue.create_file(index * 1024).path, 100 * HOUR)
    assert queue.delete_expired_file_by_time(72 * HOUR * 1000, 0, 1000, False) == 10
    assert queue.delete_expired_file_by_time(72 * HOUR * 1000, 0, 1000, False) == 5
    assert [f.file_from_offset for f in queue.files] == [15 * 1024]
    assert queue.delete_expired_file_by_time(0, 0, 1000, clean_immediately=True) == 0
    queue.close()


@pytest.mark.parametrize(("ratio", "disk_full", "clean_immediately", "space_to_delete"), [
    (0.95, True, True, True),
    (0.88, False, True, True),
    (0.80, False, False, True),
    (0.50, False, False, False),
    (-1.0, False, False, True),
])
def test_tv16_disk_ratio(tmp_path, ratio, disk_full, clean_immediately, space_to_delete) -> None:
    decision = decide_disk_space(ratio, small_config(tmp_path))
    assert (decision.disk_full, decision.clean_immediately, decision.space_to_delete) == (
        disk_full, clean_immediately, space_to_delete)


def test_delete_when() -> None:
    assert is_time_to_delete("04", hour=4) and not is_time_to_delete("04", hour=5)
    assert is_time_to_delete("03;04", hour=3) and is_time_to_delete("now")


def test_retention_by_age_then_statuses(open_store) -> None:
    store = open_store(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=100,
                       file_reserved_time_hours=1)
    store.put_messages([message(body=BODY_700, KEYS=f"k{i}") for i in range(15)])   # 3 files of 5
    wait_dispatched(store)
    files = store.commit_log.mapped_file_queue.files
    age(files[0].path, 2 * HOUR)
    assert store.clean_expired_files() == 1          # file 2 is recent: kept
    assert store.get_commit_log_min_offset() == 4096
    assert store.get_min_offset_in_queue("TopicTest", 0) == 5
    cq_dir = Path(store.config.store_dir) / "consumequeue" / "TopicTest" / "0"
    assert sorted(p.name for p in cq_dir.iterdir()) == ["00000000000000000100", "00000000000000000200"]
    result = store.get_message("g", "TopicTest", 0, 2, 32)
    assert (result.status, result.next_begin_offset, result.min_offset) == (
        GetMessageStatus.OFFSET_TOO_SMALL, 5, 5)
    assert queue_offsets(store.get_message("g", "TopicTest", 0, 5, 32)) == list(range(5, 10))
    assert store.query_message_by_key("TopicTest", "k1", 4, 0, 2**62).message_count == 0
    assert store.get_offset_in_queue_by_time("TopicTest", 0, 0) == 5


def test_retention_waits_for_readers(open_store) -> None:
    store = open_store(mapped_file_size_commit_log=4096, destroy_mapped_file_interval_forcibly_ms=60_000)
    store.put_messages([message(body=BODY_700) for _ in range(10)])
    wait_dispatched(store)   # the reput thread no longer holds the file either
    first = store.commit_log.mapped_file_queue.files[0]
    assert first.hold()
    assert store.clean_expired_files(force=True) == 0       # a reader holds it
    assert first.path.exists() and store.get_commit_log_min_offset() == 0
    first.release()
    assert store.clean_expired_files(force=True) == 1
    assert not first.path.exists()


def test_retention_forces_deletion_after_interval_forcibly(open_store) -> None:
    store = open_store(mapped_file_size_commit_log=4096, destroy_mapped_file_interval_forcibly_ms=20)
    store.put_messages([message(body=BODY_700) for _ in range(10)])
    wait_dispatched(store)
    first = store.commit_log.mapped_file_queue.files[0]
    assert first.hold()                                      # a reader that never lets go
    assert store.clean_expired_files(force=True) == 0
    time.sleep(0.03)   # not an event: the 20 ms forcible interval (measured on the real clock) passes
    assert store.clean_expired_files(force=True) == 1
    assert not first.path.exists() and first.select_mapped_buffer(0) is None
    result = store.get_message("g", "TopicTest", 0, 0, 32)
    assert (result.status, result.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, 5)


def test_disk_full_mark_stops_puts_but_not_reads(open_store) -> None:
    store = open_store()
    store.put_messages([message(body=b"before") for _ in range(3)])
    wait_dispatched(store)
    store.config.disk_space_warning_level_ratio = 0.0     # any usage counts as disk full
    store.clean_expired_files()
    assert not store.is_writeable()
    assert store.put_message(message()).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    assert queue_offsets(store.get_message("g", "TopicTest", 0, 0, 32)) == [0, 1, 2]
    store.config.disk_space_warning_level_ratio = 0.999
    store.clean_expired_files()
    assert store.is_writeable()
    assert store.put_message(message()).queue_offset == 3


def test_append_failure_marks_not_writeable_and_damages_nothing(open_store) -> None:
    store = open_store(mapped_file_size_commit_log=4096, message_index_enable=False)
    store.put_messages([message(body=BODY_700) for _ in range(5)])   # the next record needs a new file
    wait_dispatched(store)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard))   # the OS refuses to grow any file: EFBIG
    try:
        result = store.put_messages([message(body=b"late"), message(body=BODY_700)])
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)
    assert [r.status for r in result] == [PutMessageStatus.SERVICE_NOT_AVAILABLE] * 2
    assert not store.is_writeable()
    assert len(store.commit_log.mapped_file_queue.files) == 1
    assert queue_offsets(store.get_message("g", "TopicTest", 0, 0, 32)) == list(range(5))
    assert store.put_message(message()).status is PutMessageStatus.SERVICE_NOT_AVAILABLE
    store.clean_expired_files()                                # the disk is fine again
    assert store.is_writeable()
    assert store.put_message(message(body=b"late")).queue_offset == 5


def test_deletion_stops_at_the_first_file_reaching_past_the_offset_to_keep(tmp_path: Path) -> None:
    """A reader outside the store (pending timer messages) keeps the file holding its offset."""
    queue = MappedFileQueue(tmp_path, 1024)
    for index in range(5):
        age(queue.create_file(index * 1024).path, 100 * HOUR)
    assert queue.delete_expired_file_by_time(72 * HOUR * 1000, 0, 1000, False, keep_from=2100) == 2
    assert [f.file_from_offset for f in queue.files] == [2048, 3072, 4096]
    queue.close()
