"""What the broker and the name server share as gRPC servers: one asyncio (grpc.aio) server
per process with raised message limits and the process's security (ACL, TLS), bound
exclusively to its address, and a run loop that serves until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

import grpc

from rmq.broker_server.server_security import ServerSecurity

SHUTDOWN_GRACE_SECONDS = 5.0


def channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]


def create_server(listen: str, max_message_bytes: int, security: ServerSecurity) -> grpc.aio.Server:
    """A server bound to `listen` with the process's ACL interceptor and TLS (UserError when
    the address cannot be bound)."""
    # so_reuseport off: a second server on a taken port must fail, not share it.
    server = grpc.aio.server(
        interceptors=security.interceptors(),
        options=channel_options(max_message_bytes) + [("grpc.so_reuseport", 0)],
    )
    security.add_port(server, listen)
    return server


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


async def wait_for_termination() -> None:
    """Return on SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()


def run_until_terminated(serve: Callable[[], Awaitable[None]]) -> int:
    configure_logging()
    asyncio.run(serve())
    return 0
