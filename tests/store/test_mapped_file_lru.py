"""Lazily mapped ConsumeQueue files (MappedFileLru): at most max_mapped_consume_queue_files hold a
map and an fd, none idle past consume_queue_unmap_idle_ms; an unmapped file is flushed first and
mapped again on its next read or write, with the same bytes, across restarts, and under threads
reading, writing and unmapping at once."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rmq.store import GetMessageStatus, MessageStore, StoreError
from rmq.store.mapped_file import MappedFile
from rmq.stored_message import decode_records
from tests.store.conftest import message, small_config, wait_dispatched

QUEUES = 6
CQ_FILE = 20 * 16           # 16 entries per ConsumeQueue file: a queue of 40 messages spans 3 files


def held_by_process(store: MessageStore) -> tuple[int, int]:
    """(mappings, fds) this process holds on the store's ConsumeQueue files."""
    root = str(Path(store.config.store_dir).resolve() / "consumequeue")
    with open("/proc/self/maps") as maps:
        mappings = sum(root in line for line in maps)
    fds = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds += os.readlink(f"/proc/self/fd/{fd}").startswith(root)
        except OSError:
            pass           # closed meanwhile
    return mappings, fds


def cq_files(store: MessageStore) -> list[MappedFile]:
    return [mapped for cq in store._all_consume_queues() for mapped in cq.mapped_file_queue.files]


def bodies(store: MessageStore, queue_id: int) -> list[bytes]:
    """The queue's bodies from offset 0 on (a pull stops at the end of a ConsumeQueue file)."""
    read: list[bytes] = []
    offset = 0
    while offset < store.get_max_offset_in_queue("TopicTest", queue_id):
        result = store.get_message("g", "TopicTest", queue_id, offset, 1000)
        assert result.status is GetMessageStatus.FOUND
        read += [m.body for m in decode_records(result.buffer, result.sizes)]
        offset = result.next_begin_offset
    return read


def first_entries(store: MessageStore, queue_id: int) -> bytes:
    """The bytes of the queue's first ConsumeQueue file."""
    return store.find_consume_queue("TopicTest", queue_id).get_entries(0, 16).tobytes()


def body(queue_id: int, n: int) -> bytes:
    return f"q{queue_id}-{n:03d}".encode()


def fill(store: MessageStore, per_queue: int, start: int = 0) -> None:
    for n in range(start, start + per_queue):
        store.put_messages([message(queue_id=q, body=body(q, n)) for q in range(QUEUES)])
    wait_dispatched(store)


def open_lazy(path: Path, **overrides) -> MessageStore:
    values = dict(mapped_file_size_consume_queue=CQ_FILE, mapped_file_size_commit_log=64 * 1024,
                  max_mapped_consume_queue_files=3, flush_interval_consume_queue_ms=3_600_000,
                  flush_consume_queue_thorough_interval_ms=3_600_000)
    store = MessageStore(small_config(path, **(values | overrides)))
    store.start()
    return store


def test_at_most_max_mapped_files_hold_a_map_and_an_fd_and_reads_map_them_again(tmp_path: Path) -> None:
    store = open_lazy(tmp_path / "s")
    try:
        fill(store, 40)
        files = cq_files(store)
        assert len(files) == QUEUES * 3
        assert sum(f.is_mapped() for f in files) <= 3
        assert held_by_process(store) <= (3, 3)
        entries = {q: first_entries(store, q) for q in range(QUEUES)}
        for q in range(QUEUES):                      # every file mapped again, one after the other
            assert bodies(store, q) == [body(q, n) for n in range(40)]
            assert first_entries(store, q) == entries[q]
        assert held_by_process(store) <= (3, 3)
        fill(store, 10, start=40)                    # written after being unmapped: appended in place
        for q in range(QUEUES):
            assert bodies(store, q) == [body(q, n) for n in range(50)]
            assert store.get_max_offset_in_queue("TopicTest", q) == 50
    finally:
        store.shutdown()


def test_an_unmapped_file_was_flushed_first(tmp_path: Path) -> None:
    """The ConsumeQueue flush service never ran (hour-long interval): whatever was unmapped got
    its written entries fdatasynced by the unmapping, and a file written again is dirty again."""
    store = open_lazy(tmp_path / "s")
    try:
        fill(store, 40)
        unmapped = [f for f in cq_files(store) if not f.is_mapped()]
        assert len(unmapped) >= QUEUES * 3 - 3
        assert all(f.flushed_position == f.wrote_position > 0 for f in unmapped)
        assert all(not f.is_able_to_flush(0) for f in unmapped)
    finally:
        store.shutdown()


def test_idle_files_are_unmapped_after_the_idle_time(tmp_path: Path) -> None:
    store = open_lazy(tmp_path / "s", max_mapped_consume_queue_files=1000, consume_queue_unmap_idle_ms=200,
                      flush_interval_consume_queue_ms=50)
    try:
        fill(store, 20)                              # 12 files, far under the bound
        deadline = time.monotonic() + 10
        while held_by_process(store) != (0, 0):
            assert time.monotonic() < deadline, "idle ConsumeQueue files still mapped"
            time.sleep(0.05)
        assert not any(f.is_mapped() for f in cq_files(store))
        assert bodies(store, 2) == [body(2, n) for n in range(20)]
        assert held_by_process(store) <= (2, 2)     # at most the queue's two files, until idle again
    finally:
        store.shutdown()


@pytest.mark.parametrize("crash", [False, True])
def test_nothing_is_lost_across_a_restart(tmp_path: Path, crash: bool) -> None:
    store = open_lazy(tmp_path / "s")
    fill(store, 40)
    if crash:     # files closed without a shutdown: the abort file stays, recovery is abnormal
        store._running = False
        for service in store._services:
            service.shutdown()
        store._close_files()
        store.directory.unlock()
        assert (tmp_path / "s" / "abort").exists()
    else:
        store.shutdown()
    store = open_lazy(tmp_path / "s")
    try:
        assert held_by_process(store) <= (3, 3)     # recovery maps the files one at a time
        for q in range(QUEUES):
            assert bodies(store, q) == [body(q, n) for n in range(40)]
        fill(store, 5, start=40)
        assert bodies(store, 0)[-5:] == [body(0, n) for n in range(40, 45)]
    finally:
        store.shutdown()


def test_readers_writers_and_unmapping_at_once(tmp_path: Path) -> None:
    """Threads pull every queue while one puts and another unmaps every idle file as fast as it
    can (idle time 0), with room for two mapped files: each read sees a prefix of what was put
    (no crash from a mapping closed under a reader, no wrong bytes)."""
    store = open_lazy(tmp_path / "s", max_mapped_consume_queue_files=2, consume_queue_unmap_idle_ms=0)
    stop = threading.Event()
    errors: list[BaseException] = []
    reads = [0]

    def guarded(work) -> None:
        try:
            while not stop.is_set():
                work()
        except BaseException as error:   # noqa: BLE001 - reported by the test
            errors.append(error)
            stop.set()

    def read() -> None:
        for q in range(QUEUES):
            got = bodies(store, q)
            assert got == [body(q, n) for n in range(len(got))]
            reads[0] += 1

    written = [0]

    def write() -> None:
        n = written[0]
        store.put_messages([message(queue_id=q, body=body(q, n)) for q in range(QUEUES)])
        written[0] = n + 1
        if n + 1 >= 60:
            stop.set()

    threads = [threading.Thread(target=guarded, args=(work,))
               for work in (read, read, read, write, store.consume_queue_mappings.unmap_idle)]
    try:
        for thread in threads:
            thread.start()
        stop.wait(20)
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    try:
        assert not errors, errors
        assert reads[0] > 20 and written[0] == 60
        wait_dispatched(store)
        for q in range(QUEUES):
            assert bodies(store, q) == [body(q, n) for n in range(written[0])]
        entries = store.find_consume_queue("TopicTest", 0).get_entries(0, 16)
        assert np.all(np.diff(entries["offset"]) > 0)
    finally:
        store.shutdown()


def test_bad_settings_are_refused(tmp_path: Path) -> None:
    for overrides in ({"max_mapped_consume_queue_files": 0}, {"consume_queue_unmap_idle_ms": -1}):
        with pytest.raises(StoreError, match="max_mapped_consume_queue_files must be at least 1"):
            small_config(tmp_path, **overrides)
