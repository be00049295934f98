"""A broker group in this test process (two InProcessBrokers: a master and a slave whose
HAClient copies its CommitLog over HAService.Transfer), so a test can hold what the slave
receives and see what the master answers (DESIGN.md Replication, docs/replication.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from rmq import request_signing
from rmq.auth import ClientSecurity
from rmq.broker_server.acl_file import AclFile
from rmq.broker_server.server_security import ServerSecurity
from rmq.store import MessageStore, PutMessageStatus
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from tests.acl_files import write_acl
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


def member(path: Path, security: ServerSecurity | None = None, **settings: Any) -> InProcessBroker:
    store = {"mapped_file_size_commit_log": FILE_SIZE, "sync_flush_timeout_ms": SLAVE_TIMEOUT_MS}
    return InProcessBroker(path, security, broker_name="group", store=store, **settings)


ADMIN = ("admin01", "admin-secret-0001")
ACL = f"accounts:\n  - {{accessKey: {ADMIN[0]}, secretKey: '{ADMIN[1]}', admin: true}}\n"


def secured(tmp_path: Path) -> ServerSecurity:
    """--acl with one admin account, whose keys the member's own calls (a slave's) are signed with."""
    acl = write_acl(tmp_path / "acl.yml", ACL)
    return ServerSecurity(AclFile(acl), outgoing=ClientSecurity(*ADMIN))


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


@pytest.fixture
def secured_group(tmp_path: Path) -> Iterator[tuple[InProcessBroker, InProcessBroker]]:
    master = member(tmp_path / "master", secured(tmp_path), broker_role="SYNC_MASTER").start()
    slave = member(tmp_path / "slave", secured(tmp_path), broker_role="SLAVE", broker_id=1,
                   master=master.address)
    started: list[InProcessBroker] = [master]
    try:
        slave.start()
        started.append(slave)
        yield master, slave
    finally:
        for broker in reversed(started):
            broker.stop()


def test_a_call_signed_for_the_master_is_refused_by_its_slave(secured_group) -> None:
    """Each member of a group checks its own server id: a call captured on its way to the
    master cannot be replayed to the slave (nor one for the slave to the master)."""
    master, slave = secured_group
    method = "/rmq.v1.AdminService/GetBrokerStatus"
    request = rmq_pb2.BrokerStatusRequest()

    def call(broker: InProcessBroker, headers: request_signing.SignedHeaders) -> rmq_pb2.BrokerStatusResponse:
        with grpc.insecure_channel(broker.address) as channel:
            return rmq_pb2_grpc.AdminServiceStub(channel).GetBrokerStatus(
                request, metadata=headers.as_metadata(), timeout=DEADLINE_S)

    for signed_for, replayed_on, own_id in ((master, slave, "broker/group/1"),
                                            (slave, master, "broker/group")):
        target = request_signing.broker_server_id("group", signed_for.config.broker_id)
        captured = request_signing.sign(*ADMIN, target, method, request)
        assert call(signed_for, captured).broker_id == signed_for.config.broker_id
        with pytest.raises(grpc.RpcError) as refused:
            call(replayed_on, captured)
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert refused.value.details() == f"call signed for server {target!r}, this is {own_id!r}"
