"""What the broker and the name server share as gRPC servers: one asyncio (grpc.aio) server
per process with raised message limits and the process's security (ACL, TLS), bound
exclusively to its address, and a run loop that serves until SIGTERM or SIGINT.

Connections are bounded so that no client can take the process's file descriptors (the
store's files need them): at most `--max-connections` (default half the open-file limit,
which is raised to its hard limit first), 1024 concurrent calls per connection, a connection
that does not finish its handshake within 10 s (or `--idle-timeout` when shorter) or stays
without a call for `--idle-timeout` is closed, and clients may not ping more often than every
10 s without calls."""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, cast

import grpc

from rmq import event_loop
from rmq.broker_server.security.server_security import ServerSecurity

SHUTDOWN_GRACE_SECONDS = 5.0
# Calls in flight per connection. A client opens one connection per broker and long-polls one
# pull per queue it consumes there, so this bounds the queues one consumer can hold per broker.
MAX_CONCURRENT_STREAMS = 1024
HANDSHAKE_TIMEOUT_MS = 10_000
KEEPALIVE_TIME_MS = 60_000       # the server pings a silent connection with calls in flight...
KEEPALIVE_TIMEOUT_MS = 20_000    # ...and closes it when the ping is not answered in time
MIN_CLIENT_PING_INTERVAL_MS = 10_000
MAX_PING_STRIKES = 2

log = logging.getLogger(__name__)


def channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]


def raise_open_file_limit() -> int:
    """Raise this process's soft open-file limit to its hard limit; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft == resource.RLIM_INFINITY:
        return soft if soft != resource.RLIM_INFINITY else 1 << 20
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def server_options(max_message_bytes: int, max_connections: int,
                   idle_timeout_s: float) -> list[tuple[str, int]]:
    # so_reuseport off: a second server on a taken port must fail, not share it.
    return channel_options(max_message_bytes) + [
        ("grpc.so_reuseport", 0),
        ("grpc.max_allowed_incoming_connections", max_connections),
        ("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS),
        ("grpc.server_handshake_timeout_ms", min(HANDSHAKE_TIMEOUT_MS, int(idle_timeout_s * 1000))),
        ("grpc.max_connection_idle_ms", int(idle_timeout_s * 1000)),
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
    ]


def connection_limit(security: ServerSecurity) -> int:
    """--max-connections, by default half the open-file limit (raised to its hard limit first)."""
    return security.max_connections or max(16, raise_open_file_limit() // 2)


def create_server(listen: str, max_message_bytes: int, security: ServerSecurity,
                  server_id: str) -> grpc.aio.Server:
    """A server bound to `listen` with the process's ACL interceptor (calls signed for
    `server_id`), TLS and connection limits. UserError when the address cannot be bound, or
    lies beyond loopback without an ACL (ServerSecurity.check_listen)."""
    security.check_listen(listen)
    server = grpc.aio.server(
        interceptors=security.interceptors(server_id),
        options=server_options(max_message_bytes, connection_limit(security), security.idle_timeout_s),
    )
    security.add_port(server, listen)
    return server


class _GenericOnly:
    """A server as the generated `add_*Servicer_to_server` functions see it through
    `generic_only`: their generic handler is added, their registered-method table is not."""

    def __init__(self, server: grpc.aio.Server) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        self._server.add_generic_rpc_handlers(handlers)

    def add_registered_method_handlers(self, service: str,
                                       handlers: Mapping[str, grpc.RpcMethodHandler[Any, Any]]) -> None:
        """Not registered: the generic handler added with the same handlers serves the methods."""


def generic_only(server: grpc.aio.Server) -> grpc.aio.Server:
    """`server`, for the generated `add_*Servicer_to_server` functions to add services to as
    generic handlers only (issue 41, bench/NOTES.md "One message per request, second pass"):
    grpc.aio's server keeps one pending request task per registered method and, for every call
    it accepts, waits on all of them (`asyncio.wait`) and starts a new one — with the broker's ~30
    methods about 260 Python calls per unary call; a call to a generic handler is matched by its
    path in a dict instead. The methods served are the same."""
    return cast(grpc.aio.Server, _GenericOnly(server))


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


async def wait_for_termination() -> None:
    """Return on SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


def run_until_terminated(serve: Callable[[], Coroutine[Any, Any, None]]) -> int:
    configure_logging()
    event_loop.run(_logging_the_loop(serve))
    return 0


async def _logging_the_loop(serve: Callable[[], Coroutine[Any, Any, None]]) -> None:
    # DEBUG: a refused start (bad config, an unsafe --listen) stays the one line it names
    log.debug("event loop: %s", event_loop.loop_name(asyncio.get_running_loop()))
    await serve()
