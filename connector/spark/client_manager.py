"""The clients a Spark executor's Python worker reads with, shared by its tasks (RocketMQ's
MQClientManager: one client instance per process and client configuration).

Spark reuses a Python worker process for the tasks of every micro-batch
(spark.python.worker.reuse, on by default), so a partition that opened its own RmqClient
(channels, a route lookup) and Flight client (a connection per broker) paid that start-up in
every task, eight times per micro-batch of eight queues. Here the tasks of one worker share one
RmqClient and FlightReader per connection key: the endpoints, the request timeout, the
credentials and the TLS settings with the identity (modification time and size) of the TLS
files, so reads under two accounts never share a connection and a rotated certificate is loaded.

A client that a read failed with is retired: the next task connects afresh (the reader's own
retries within `brokerOutageWindowMs` are unchanged, on the client of its task). At most
`capacity` clients are kept, the least recently used one retired first, and one no task used
for `idle_seconds` is retired at the next lease. A retired client is closed once no task uses
it any more.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rmq.auth import ClientSecurity
from rmq.connector.client import RmqClient
from rmq.connector.flight_reader import FlightReader

CAPACITY = 8            # connection keys kept per process (one per query's options, typically)
IDLE_SECONDS = 300.0    # a client no task used for this long is closed


@dataclass(frozen=True)
class ConnectionKey:
    """Everything that makes two executors' clients differ."""

    endpoints: str
    timeout: float
    security: ClientSecurity
    tls_files: tuple[tuple[int, int] | None, ...]   # (mtime_ns, size) of each TLS file, None when unset

    @classmethod
    def of(cls, endpoints: str, timeout: float, security: ClientSecurity) -> ConnectionKey:
        files = (security.tls_ca_file, security.tls_cert_file, security.tls_key_file)
        return cls(endpoints, timeout, security, tuple(_identity(path) for path in files))


def _identity(path: str | None) -> tuple[int, int] | None:
    if path is None:
        return None
    try:
        status = os.stat(path)
    except OSError:   # RmqClient names the unreadable file when it connects
        return None
    return status.st_mtime_ns, status.st_size


@dataclass(frozen=True)
class Connection:
    """A broker client and the Flight data plane reader on top of it."""

    client: RmqClient
    flight: FlightReader

    def close(self) -> None:
        self.flight.close()
        self.client.close()


def connect(key: ConnectionKey) -> Connection:
    client = RmqClient(key.endpoints, timeout=key.timeout, **key.security.client_kwargs())
    return Connection(client, FlightReader(client))


@dataclass
class _Entry:
    connection: Connection
    last_used: float
    users: int = 0
    retired: bool = False


class ClientManager:
    """Connections by key, shared by the tasks of one process (thread-safe)."""

    def __init__(self, capacity: int = CAPACITY, idle_seconds: float = IDLE_SECONDS,
                 clock: Callable[[], float] = time.monotonic,
                 connector: Callable[[ConnectionKey], Connection] = connect) -> None:
        self._capacity = capacity
        self._idle_seconds = idle_seconds
        self._clock = clock
        self._connect = connector
        self._lock = threading.Lock()
        self._entries: OrderedDict[ConnectionKey, _Entry] = OrderedDict()

    @contextmanager
    def lease(self, key: ConnectionKey) -> Iterator[Connection]:
        """The connection for `key` while the block runs: the cached one, else a new one. An
        exception out of the block retires it (a generator closed early does not)."""
        entry = self._acquire(key)
        try:
            yield entry.connection
        except Exception:
            self._retire(key, entry)
            raise
        finally:
            self._release(entry)

    def close(self) -> None:
        """Retire every connection (each closed now, or when its last task ends)."""
        with self._lock:
            entries = list(self._entries.items())
        for key, entry in entries:
            self._retire(key, entry)

    def _acquire(self, key: ConnectionKey) -> _Entry:
        """The entry for `key`, counted as in use; connections idle too long retired."""
        with self._lock:
            now = self._clock()
            idle = [(k, e) for k, e in self._entries.items() if self._expired(e, now)]
            entry = self._entries.get(key)
            if entry is None or self._expired(entry, now):
                entry = None
            else:
                entry.users += 1
                self._entries.move_to_end(key)
        for idle_key, idle_entry in idle:
            self._retire(idle_key, idle_entry)
        return entry if entry is not None else self._add(key, _Entry(self._connect(key), self._clock()))

    def _expired(self, entry: _Entry, now: float) -> bool:
        return entry.users == 0 and now - entry.last_used >= self._idle_seconds

    def _add(self, key: ConnectionKey, entry: _Entry) -> _Entry:
        """Keep `entry` for `key` in use (or the one another thread kept meanwhile), retiring the
        least recently used beyond the capacity."""
        with self._lock:
            kept = self._entries.setdefault(key, entry)
            kept.users += 1
            self._entries.move_to_end(key)
            evicted = list(self._entries.items())[:max(0, len(self._entries) - self._capacity)]
        if kept is not entry:
            entry.connection.close()
        for old_key, old_entry in evicted:
            self._retire(old_key, old_entry)
        return kept

    def _retire(self, key: ConnectionKey, entry: _Entry) -> None:
        with self._lock:
            if self._entries.get(key) is entry:
                del self._entries[key]
            entry.retired = True
            idle = entry.users == 0
        if idle:
            entry.connection.close()

    def _release(self, entry: _Entry) -> None:
        with self._lock:
            entry.users -= 1
            entry.last_used = self._clock()
            closing = entry.retired and entry.users == 0
        if closing:
            entry.connection.close()


# The connections of this process's tasks (an executor's Python worker, or a driver in tests).
EXECUTOR_CLIENTS = ClientManager()
