"""A broker group in this test process (two InProcessBrokers: a master and a slave whose
HAClient copies its CommitLog over HAService.Transfer), so a test can hold what the slave
receives and see what the master answers (DESIGN.md Replication, docs/replication.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rmq.store import MessageStore, PutMessageStatus
from tests.broker_server.in_process_broker import InProcessBroker
from tests.store.conftest import message

FILE_SIZE = 64 * 1024          # CommitLog file size of both members
SLAVE_TIMEOUT_MS = 300         # how long a SYNC_MASTER put waits for the slave
DEADLINE_S = 30


def wait_until(condition: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def member(path: Path, **settings: Any) -> InProcessBroker:
    store = {"mapped_file_size_commit_log": FILE_SIZE, "sync_flush_timeout_ms": SLAVE_TIMEOUT_MS}
    return InProcessBroker(path, broker_name="group", store=store, **settings)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[tuple[InProcessBroker, InProcessBroker]]:
    master = member(tmp_path / "master", broker_role="SYNC_MASTER").start()
    slave = member(tmp_path / "slave", broker_role="SLAVE", broker_id=1, master=master.address)
    started: list[InProcessBroker] = [master]
    try:
        slave.start()
        started.append(slave)
        yield master, slave
    finally:
        for broker in reversed(started):
            broker.stop()


def in_sync(master: MessageStore, slave: MessageStore) -> bool:
    end = master.get_commit_log_max_offset()
    return slave.get_commit_log_max_offset() == end and any(
        s.ack_offset == end for s in master.ha_service.slaves())


class ChunkGate:
    """Holds the replicated chunks a slave store receives from the n-th one on (the slave's
    HAClient then neither writes nor acknowledges them) until released."""

    def __init__(self, store: MessageStore, hold_from: int) -> None:
        self.received: list[tuple[int, int]] = []     # (offset, length) of each chunk
        self._store_append = store.append_replicated
        self._hold_from = hold_from
        self._open = threading.Event()
        store.append_replicated = self._append  # type: ignore[method-assign]

    def _append(self, offset: int, data: bytes) -> None:
        self.received.append((offset, len(data)))
        if len(self.received) >= self._hold_from:
            self._open.wait(DEADLINE_S)
        self._store_append(offset, data)

    def release(self) -> None:
        self._open.set()


def test_sync_master_acknowledges_only_what_the_slave_holds(group) -> None:
    """A batch that crosses a CommitLog file end reaches the slave as two chunks; while the
    second is held, the slave has not got the batch, so the put answers FLUSH_SLAVE_TIMEOUT."""
    master, slave = group
    master_store, slave_store = master.controller.store, slave.controller.store
    body = b"x" * 1000
    wait_until(lambda: bool(master_store.ha_service.slaves()), "the slave to connect")
    while master_store.get_commit_log_max_offset() < FILE_SIZE - 4 * len(body):   # near the file end
        master_store.put_message(message(body=body))
    wait_until(lambda: in_sync(master_store, slave_store), "the slave to catch up")
    start = master_store.get_commit_log_max_offset()
    gate = ChunkGate(slave_store, hold_from=2)
    try:
        results = master_store.put_messages([message(body=body) for _ in range(8)])   # ~8 KiB: crosses
        assert {r.status for r in results} == {PutMessageStatus.FLUSH_SLAVE_TIMEOUT}
        assert gate.received[0] == (start, FILE_SIZE - start)                # to the file end
        assert gate.received[1][0] == FILE_SIZE                              # the next file
    finally:
        gate.release()
    wait_until(lambda: in_sync(master_store, slave_store), "the held chunk to be acknowledged")
