"""What the broker and the name server share as gRPC servers: one asyncio (grpc.aio) server
per process with raised message limits, bound exclusively to its address, and a run loop
that serves until SIGTERM or SIGINT."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

import grpc

from broker_server.errors import UserError

SHUTDOWN_GRACE_SECONDS = 5.0


def channel_options(max_message_bytes: int) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
    ]


def create_server(listen: str, max_message_bytes: int) -> grpc.aio.Server:
    # so_reuseport off: a second server on a taken port must fail, not share it.
    server = grpc.aio.server(options=channel_options(max_message_bytes) + [("grpc.so_reuseport", 0)])
    try:
        port = server.add_insecure_port(listen)
    except RuntimeError as error:
        raise UserError(f"cannot listen on {listen}: {error}") from None
    if port == 0:
        raise UserError(f"cannot listen on {listen}: address in use or not available")
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
