"""The Flight data plane's connections, counted in `--max-connections` (issue 39 Medium 8).

pyarrow's FlightServerBase binds and accepts on its own and takes no gRPC channel arguments, so
neither `grpc.max_allowed_incoming_connections` nor an idle timeout can be given to it. The broker
looks at its own sockets instead (Linux: /proc/self/fd, and getsockname / getpeername on a
duplicate of each socket not seen before) every CHECK_INTERVAL_S, and shuts down (shutdown(2);
gRPC then closes the connection as if the client had) the Flight connections
- past `max_per_address` from one client IP (the newest first),
- past what the gRPC port's connections leave of `--max-connections` (the newest first),
- without a stream its client reads for `idle_timeout_s` (`--idle-timeout`, as on the gRPC port
  for a connection without a call): no stream, or none whose client took a batch for that long.
  A stream whose client stopped reading ends with its connection, giving back its batch's
  bytes and its slot (issue 39 High 3).
A client reconnects by itself at its next call. A check costs a directory listing and a readlink
per open descriptor (the machine's other sockets are never read); elsewhere than Linux nothing is
counted."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("rmq.flight")

CHECK_INTERVAL_S = 1.0
_OWN_FDS = Path("/proc/self/fd")
_V4_MAPPED = "::ffff:"


@dataclass(frozen=True)
class Connection:
    """One connection accepted on a local port: the client's address, the socket's inode."""

    address: str
    port: int
    inode: int

    @property
    def peer(self) -> str:
        """As gRPC names it (ServerCallContext.peer): `ipv4:IP:PORT`, `ipv6:[IP]:PORT`."""
        if ":" in self.address:
            return f"ipv6:[{self.address}]:{self.port}"
        return f"ipv4:{self.address}:{self.port}"


@dataclass(frozen=True)
class _Endpoints:
    local_port: int
    connection: Connection


def own_sockets() -> dict[int, int]:
    """This process's sockets: inode -> file descriptor."""
    sockets = {}
    try:
        descriptors = os.listdir(_OWN_FDS)
    except OSError:
        return {}
    for name in descriptors:
        try:
            target = os.readlink(_OWN_FDS / name)
        except OSError:   # closed meanwhile
            continue
        if target.startswith("socket:["):
            sockets[int(target[8:-1])] = int(name)
    return sockets


@contextlib.contextmanager
def _socket(fd: int, inode: int) -> Iterator[socket.socket | None]:
    """A duplicate of descriptor `fd` as a socket object if it still is socket `inode` (it may
    have been closed and reused since it was listed), else None; closed after the block."""
    try:
        duplicate = os.dup(fd)
    except OSError:
        yield None
        return
    try:
        same = os.fstat(duplicate).st_ino == inode
    except OSError:
        same = False
    if not same:
        os.close(duplicate)
        yield None
        return
    with socket.socket(fileno=duplicate) as sock:
        yield sock


def _endpoints(fd: int, inode: int) -> _Endpoints | None:
    """The local port and the peer of the TCP socket `fd` if it still is socket `inode` and is
    connected; None otherwise (a listening socket, another family, a descriptor closed since)."""
    with _socket(fd, inode) as sock:
        if sock is None or sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET,
                                                                                   socket.AF_INET6):
            return None
        try:
            local, peer = sock.getsockname(), sock.getpeername()
        except OSError:   # not connected
            return None
    address = peer[0][len(_V4_MAPPED):] if peer[0].startswith(_V4_MAPPED) else peer[0]
    return _Endpoints(local[1], Connection(address, peer[1], inode))


def shut_down(fd: int, inode: int) -> bool:
    """shutdown(2) the socket `fd` if it still is socket `inode`; True when done."""
    with _socket(fd, inode) as sock:
        if sock is None:
            return False
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            return False
        return True


class OwnConnections:
    """This process's connections accepted on given ports, each socket looked at once."""

    def __init__(self) -> None:
        self._seen: dict[int, _Endpoints | None] = {}   # inode -> its endpoints (None: not a connection)

    def on(self, ports: Collection[int]) -> tuple[dict[int, list[Connection]], dict[int, int]]:
        """Per port, the connections accepted on it; and inode -> descriptor of every socket."""
        sockets = own_sockets()
        self._seen = {inode: self._seen[inode] if inode in self._seen else _endpoints(fd, inode)
                      for inode, fd in sockets.items()}
        found: dict[int, list[Connection]] = {port: [] for port in ports}
        for endpoints in self._seen.values():
            if endpoints is not None and endpoints.local_port in found:
                found[endpoints.local_port].append(endpoints.connection)
        return found, sockets


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int          # --max-connections: the gRPC port's and Flight's together
    max_per_address: int          # max_flight_connections_per_address
    idle_timeout_s: float         # --idle-timeout


class FlightConnectionGuard:
    def __init__(self, flight_port: int, grpc_port: int, limits: ConnectionLimits,
                 streaming: Callable[[], dict[str, float]], clock: Callable[[], float] = time.monotonic
                 ) -> None:
        """`streaming()`: the peers (ServerCallContext.peer) with Flight streams, each with when
        its client last took a batch of one (on `clock`)."""
        self.flight_port = flight_port
        self.grpc_port = grpc_port
        self.limits = limits
        self.streaming = streaming
        self.clock = clock
        self._connections = OwnConnections()
        self._active: dict[int, float] = {}   # inode -> when it was first seen or its client last read
        self._first_seen: dict[int, int] = {}     # inode -> the check that saw it first (age order)
        self._checks = 0
        self._lock = threading.Lock()   # check() runs on the guard's thread (and in tests)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="rmq-flight-connections", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(CHECK_INTERVAL_S):
            self.check()

    def check(self) -> list[Connection]:
        """Shut down the connections past the bounds; the ones shut down."""
        with self._lock:
            return self._check()

    def _check(self) -> list[Connection]:
        by_port, mine = self._connections.on((self.flight_port, self.grpc_port))
        connections = by_port[self.flight_port]
        self._checks += 1
        self._first_seen = {c.inode: self._first_seen.get(c.inode, self._checks) for c in connections}
        room = self.limits.max_connections - len(by_port[self.grpc_port])
        closing = self._excess(connections, max(0, room)) + self._idle(connections)
        closed = [c for c in dict.fromkeys(closing) if shut_down(mine[c.inode], c.inode)]
        if closed:
            log.warning("Flight: closed %d connections past the bounds (--max-connections, "
                        "max_flight_connections_per_address, --idle-timeout)", len(closed))
        return closed

    def _excess(self, connections: list[Connection], room: int) -> list[Connection]:
        """The newest past max_per_address from one address, then the newest past `room`."""
        kept: list[Connection] = []
        excess: list[Connection] = []
        per_address: dict[str, int] = {}
        for connection in sorted(connections, key=lambda c: (self._first_seen[c.inode], c.inode)):
            count = per_address.get(connection.address, 0)
            if count >= self.limits.max_per_address or len(kept) >= room:
                excess.append(connection)
            else:
                per_address[connection.address] = count + 1
                kept.append(connection)
        return excess

    def _idle(self, connections: list[Connection]) -> list[Connection]:
        now, progress = self.clock(), self.streaming()
        never = float("-inf")
        self._active = {c.inode: max(self._active.get(c.inode, now), progress.get(c.peer, never))
                        for c in connections}
        return [c for c in connections if now - self._active[c.inode] >= self.limits.idle_timeout_s]
