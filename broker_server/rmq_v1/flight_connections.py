"""The Flight data plane's connections, counted in `--max-connections` (issue 39 Medium 8).

pyarrow's FlightServerBase binds and accepts on its own and takes no gRPC channel arguments, so
neither `grpc.max_allowed_incoming_connections` nor an idle timeout can be given to it. The broker
looks at its own sockets instead (Linux: /proc/net/tcp{,6} for the connections established to a
port, /proc/self/fd for which of them are this process's) every CHECK_INTERVAL_S, and shuts down
(shutdown(2); gRPC then closes the connection as if the client had) the Flight connections
- past `max_per_address` from one client IP (the newest first),
- past what the gRPC port's connections leave of `--max-connections` (the newest first),
- without a stream for `idle_timeout_s` (`--idle-timeout`, as on the gRPC port).
A client reconnects by itself at its next call. Elsewhere than Linux nothing is counted."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("rmq.flight")

CHECK_INTERVAL_S = 1.0
ESTABLISHED = "01"
_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_OWN_FDS = Path("/proc/self/fd")


@dataclass(frozen=True)
class Connection:
    """One established connection to a local port: the client's address, the socket's inode."""

    address: str
    port: int
    inode: int

    @property
    def peer(self) -> str:
        """As gRPC names it (ServerCallContext.peer): `ipv4:IP:PORT`, `ipv6:[IP]:PORT`."""
        if ":" in self.address:
            return f"ipv6:[{self.address}]:{self.port}"
        return f"ipv4:{self.address}:{self.port}"


def established(local_port: int, tables: Iterable[Path] = _TABLES) -> list[Connection]:
    """Established connections to `local_port` in this network namespace (any process's)."""
    found = []
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], int(fields[9])
            if state == ESTABLISHED and int(local.rpartition(":")[2], 16) == local_port:
                address, port = _address(remote)
                found.append(Connection(address, port, inode))
    return found


def _address(hex_address: str) -> tuple[str, int]:
    """/proc/net/tcp's `0100007F:1F90` as ("127.0.0.1", 8080); v6 (and v4-mapped) likewise."""
    host, _, port = hex_address.partition(":")
    raw = bytes.fromhex(host)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1]), int(port, 16)
    packed = b"".join(raw[n:n + 4][::-1] for n in range(0, 16, 4))   # four host-order words
    if packed.startswith(b"\0" * 10 + b"\xff\xff"):
        return socket.inet_ntop(socket.AF_INET, packed[12:]), int(port, 16)
    return socket.inet_ntop(socket.AF_INET6, packed), int(port, 16)


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


def shut_down(fd: int, inode: int) -> bool:
    """shutdown(2) the socket `fd` if it still is socket `inode` (the descriptor may have been
    closed and reused since it was listed); True when done."""
    try:
        duplicate = os.dup(fd)
    except OSError:
        return False
    try:
        if os.fstat(duplicate).st_ino != inode:
            return False
        with socket.socket(fileno=duplicate) as sock:
            duplicate = -1   # the socket object owns it now
            sock.shutdown(socket.SHUT_RDWR)
        return True
    except OSError:
        return False
    finally:
        if duplicate >= 0:
            os.close(duplicate)


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int          # --max-connections: the gRPC port's and Flight's together
    max_per_address: int          # max_flight_connections_per_address
    idle_timeout_s: float         # --idle-timeout


class FlightConnectionGuard:
    def __init__(self, flight_port: int, grpc_port: int, limits: ConnectionLimits,
                 streaming: Callable[[], set[str]], clock: Callable[[], float] = time.monotonic) -> None:
        """`streaming()`: the peers (ServerCallContext.peer) with a Flight stream open."""
        self.flight_port = flight_port
        self.grpc_port = grpc_port
        self.limits = limits
        self.streaming = streaming
        self.clock = clock
        self._idle_since: dict[int, float] = {}   # inode -> when it was last seen without a stream
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
        mine = own_sockets()
        connections = [c for c in established(self.flight_port) if c.inode in mine]
        self._checks += 1
        self._first_seen = {c.inode: self._first_seen.get(c.inode, self._checks) for c in connections}
        room = self.limits.max_connections - sum(c.inode in mine for c in established(self.grpc_port))
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
        now, streaming = self.clock(), self.streaming()
        idle_since = {c.inode: self._idle_since.get(c.inode, now) for c in connections
                      if c.peer not in streaming}
        self._idle_since = idle_since
        return [c for c in connections
                if c.inode in idle_since and now - idle_since[c.inode] >= self.limits.idle_timeout_s]
