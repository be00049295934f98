"""Flight's connections count in --max-connections with the gRPC port's, at most
max_flight_connections_per_address come from one IP, and one without a stream for --idle-timeout
is closed (issue 39 Medium 8): pyarrow's Flight server takes no gRPC arguments, so the broker's
FlightConnectionGuard shuts down the excess connections it finds among its own sockets."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import grpc

from rmq.broker_server.rmq_v1.flight_connections import (
    ConnectionLimits,
    FlightConnectionGuard,
    OwnConnections,
)
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from tests.broker_server.in_process_broker import InProcessBroker
from tests.waiting import wait_until

DEADLINE_S = 10   # a few of the guard's 1 s checks


def connect(broker: InProcessBroker, opened: list[socket.socket], count: int) -> list[socket.socket]:
    """`count` more TCP connections to the Flight port, each seen by the guard before the next
    (so their age order is the order they were opened in)."""
    flight = broker.controller.flight
    assert flight is not None
    new = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", flight.port))
        sock.setblocking(False)
        opened.append(sock)
        new.append(sock)
        wait_until(lambda: accepted(flight.port, sock), "the connection accepted")   # noqa: B023
        guard(broker).check()   # seen now: older than the next
    return new


def accepted(flight_port: int, sock: socket.socket) -> bool:
    """The broker holds the server side of `sock`."""
    found, _ = OwnConnections().on([flight_port])
    return any(c.port == sock.getsockname()[1] for c in found[flight_port])


def guard(broker: InProcessBroker) -> FlightConnectionGuard:
    assert broker.controller.flight_connections is not None
    return broker.controller.flight_connections


def closed_by_peer(sock: socket.socket) -> bool:
    """Whether the broker closed `sock` (what it sent before, its HTTP/2 settings, read and dropped)."""
    try:
        while sock.recv(65536):
            pass
    except BlockingIOError:
        return False
    except ConnectionResetError:
        pass
    return True


def states(socks: list[socket.socket]) -> list[bool]:
    return [closed_by_peer(sock) for sock in socks]


@contextlib.contextmanager
def broker_with(tmp_path: Path, security: ServerSecurity, **settings: object
                ) -> Iterator[tuple[InProcessBroker, list[socket.socket]]]:
    """A broker and the test's connections to it, closed before it stops (an open one would hold
    its shutdown for the grace period)."""
    broker, opened = InProcessBroker(tmp_path, security, **settings).start(), []
    try:
        yield broker, opened
    finally:
        for sock in opened:
            sock.close()
        broker.stop()


def test_one_address_holds_at_most_its_flight_connections(tmp_path: Path) -> None:
    with broker_with(tmp_path, ServerSecurity(),
                     max_flight_connections_per_address=2) as (broker, connections):
        socks = connect(broker, connections, 4)
        wait_until(lambda: states(socks) == [False, False, True, True],
                   lambda: f"the two newest closed (closed: {states(socks)})", timeout=DEADLINE_S)


def test_flight_connections_count_in_max_connections_with_the_grpc_ports(tmp_path: Path) -> None:
    with broker_with(tmp_path, ServerSecurity(max_connections=3)) as (broker, connections):
        socks = connect(broker, connections, 4)
        wait_until(lambda: states(socks) == [False, False, False, True],
                   lambda: f"the newest past 3 closed (closed: {states(socks)})", timeout=DEADLINE_S)
        with grpc.insecure_channel(broker.address) as channel:     # one connection to the gRPC port
            rmq_pb2_grpc.MessagingServiceStub(channel).GetTopicOffsets(
                rmq_pb2.GetTopicOffsetsRequest(topic="none"), timeout=10)
            wait_until(lambda: states(socks) == [False, False, True, True],
                       lambda: f"one more Flight connection closed (closed: {states(socks)})",
                       timeout=DEADLINE_S)


def test_a_flight_connection_without_a_stream_is_closed_after_the_idle_timeout(tmp_path: Path) -> None:
    with broker_with(tmp_path, ServerSecurity(idle_timeout_s=1.0)) as (broker, connections):
        [sock] = connect(broker, connections, 1)
        wait_until(lambda: closed_by_peer(sock), "the idle connection closed", timeout=DEADLINE_S)


def test_the_connections_accepted_on_a_port_are_found_among_the_processs_sockets() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()) as client:
        accepted, _ = server.accept()
        with accepted:
            port = server.getsockname()[1]
            found, sockets = OwnConnections().on([port, 0])
            [connection] = found[port]
            assert found[0] == [] and connection.inode in sockets
            assert (connection.address, connection.port) == client.getsockname()
            assert connection.peer == f"ipv4:127.0.0.1:{client.getsockname()[1]}"


def test_a_connection_with_a_stream_is_not_idle() -> None:
    """Only connections without a stream read for the whole idle timeout are closed."""
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(server.getsockname()) as streaming, \
            socket.create_connection(server.getsockname()) as idle:
        accepted = [server.accept()[0] for _ in range(2)]
        now = [0.0]
        peer = f"ipv4:127.0.0.1:{streaming.getsockname()[1]}"
        limits = ConnectionLimits(max_connections=100, max_per_address=100, idle_timeout_s=5.0)
        guard = FlightConnectionGuard(server.getsockname()[1], 0, limits, lambda: {peer: now[0]},
                                      clock=lambda: now[0])
        assert guard.check() == []
        now[0] = 5.0
        assert [c.port for c in guard.check()] == [idle.getsockname()[1]]
        for sock in accepted:
            sock.close()
