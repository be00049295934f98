"""The executor-wide connections of the Spark source (connector/spark/client_manager.py): the
tasks of one Python worker share a connection per key, never across accounts or TLS files, and a
connection that failed, went idle or fell out of the bound is closed, once no task uses it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")

from rmq.auth import ClientSecurity  # noqa: E402
from rmq.connector.errors import RmqReadError  # noqa: E402
from rmq.connector.spark.client_manager import (  # noqa: E402
    ClientManager,
    Connection,
    ConnectionKey,
    connect,
)
from tests.clocks import ManualClock  # noqa: E402

ENDPOINTS = "127.0.0.1:1"   # nothing is dialled: clients connect on their first call
ALICE = ClientSecurity(access_key="alice", secret_key="alice-secret")
BOB = ClientSecurity(access_key="bob", secret_key="bob-secret")


@dataclass(frozen=True, eq=False)
class ObservedConnection(Connection):
    """A real connection that notes when it is closed."""

    closed: list[Connection]

    def close(self) -> None:
        self.closed.append(self)
        super().close()


@pytest.fixture
def closed() -> list[Connection]:
    return []


def manager(closed: list[Connection], capacity: int = 8, clock: ManualClock | None = None) -> ClientManager:
    def connector(key: ConnectionKey) -> Connection:
        real = connect(key)
        return ObservedConnection(real.client, real.flight, closed)
    return ClientManager(capacity=capacity, idle_seconds=60.0, clock=clock or ManualClock(0.0),
                         connector=connector)


def key(endpoints: str = ENDPOINTS, security: ClientSecurity = ALICE, timeout: float = 3.0) -> ConnectionKey:
    return ConnectionKey.of(endpoints, timeout, security)


def used(clients: ClientManager, connection_key: ConnectionKey) -> Connection:
    with clients.lease(connection_key) as connection:
        return connection


def test_tasks_with_the_same_options_share_one_connection(closed: list[Connection]) -> None:
    clients = manager(closed)
    first = used(clients, key())
    assert used(clients, key()) is first
    assert first.client.credentials is not None and first.client.credentials.access_key == "alice"
    assert closed == []


def test_other_credentials_endpoints_or_timeout_never_share(closed: list[Connection]) -> None:
    clients = manager(closed)
    alice = used(clients, key())
    bob = used(clients, key(security=BOB))
    assert bob is not alice
    assert bob.client.credentials is not None and bob.client.credentials.access_key == "bob"
    assert used(clients, key(endpoints="127.0.0.1:2")) not in (alice, bob)
    assert used(clients, key(timeout=5.0)) not in (alice, bob)


def test_a_rotated_tls_file_gets_a_new_connection(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("first")
    security = ClientSecurity(tls=True, tls_ca_file=str(ca))
    before = key(security=security)
    assert key(security=security) == before
    ca.write_text("the rotated certificate")
    assert key(security=security) != before


def test_a_failed_read_retires_its_connection(closed: list[Connection]) -> None:
    clients = manager(closed)
    failed = used(clients, key())
    with pytest.raises(RmqReadError), clients.lease(key()) as connection:
        assert connection is failed
        raise RmqReadError("the broker stayed away")
    assert closed == [failed]
    assert used(clients, key()) is not failed


def test_a_read_stopped_early_keeps_its_connection(closed: list[Connection]) -> None:
    clients = manager(closed)

    def rows() -> Iterator[int]:
        with clients.lease(key()):
            yield from range(10)

    reading = rows()
    next(reading)
    reading.close()   # Spark stops consuming the task's iterator (a limit, a cancelled task)
    assert closed == []
    first = used(clients, key())
    assert used(clients, key()) is first


def test_at_most_capacity_connections_the_least_recently_used_closed(closed: list[Connection]) -> None:
    clients = manager(closed, capacity=2)
    first = used(clients, key(endpoints="127.0.0.1:1"))
    second = used(clients, key(endpoints="127.0.0.1:2"))
    assert used(clients, key(endpoints="127.0.0.1:1")) is first   # now the most recently used
    used(clients, key(endpoints="127.0.0.1:3"))
    assert closed == [second]


def test_a_connection_in_use_is_closed_only_when_its_task_ends(closed: list[Connection]) -> None:
    clients = manager(closed, capacity=1)
    with clients.lease(key(endpoints="127.0.0.1:1")) as busy:
        used(clients, key(endpoints="127.0.0.1:2"))
        assert closed == []
    assert closed == [busy]


def test_an_idle_connection_is_closed_at_the_next_lease(closed: list[Connection]) -> None:
    clock = ManualClock(0.0)
    clients = manager(closed, clock=clock)
    idle = used(clients, key())
    clock.advance(59.0)
    assert used(clients, key()) is idle
    clock.advance(60.0)
    fresh = used(clients, key())
    assert closed == [idle] and fresh is not idle


def test_close_closes_every_connection(closed: list[Connection]) -> None:
    clients = manager(closed)
    connections = {used(clients, key()), used(clients, key(security=BOB))}
    clients.close()
    assert set(closed) == connections
