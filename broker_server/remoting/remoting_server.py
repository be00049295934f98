"""The remoting listener (RocketMQ NettyRemotingServer, docs/remoting-protocol.md "Frames"): an
asyncio TCP server reading length-prefixed RemotingCommand frames, running each request as its
own task and writing its response under the request's opaque; oneway requests get none.
Responses from a client (to requests the server sent it) complete the server's waiting call.
A CANCEL_REQUEST (rmq's own code, oneway) ends the request of that connection whose opaque it
names, unanswered: a held pull its client no longer wants leaves the hold table at once, as a
cancelled gRPC call does. It reaches only the connection's own requests, so it needs no ACL.

Bounded (`RemotingLimits`): a frame longer than max_frame_bytes, a length prefix below 4 or a
header that does not decode closes the connection (nothing is allocated for it first); past
max_connections a new connection is closed at once; a connection runs at most
max_requests_per_connection requests at a time, and request frames read and not yet answered
hold at most max_request_bytes_per_connection on one connection and max_request_bytes in all
(request_bytes: reading waits); a connection silent for idle_timeout_s is closed.

A broker serving TLS (`--tls-cert`) serves it on this port too, with the same certificate and,
for mutual TLS, the same client CA (RocketMQ's tls.enable on the remoting server)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from rmq.broker_server.remoting.request_bytes import RequestBytes
from rmq.broker_server.security.tls import ServerTls
from rmq.remoting.remoting_command import (
    LENGTH,
    RPC_ONEWAY,
    FrameError,
    RemotingCommand,
    decode,
)
from rmq.remoting.request_code import CANCELLED_OPAQUE, RequestCode, ResponseCode
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)
MiB = 1024 * 1024
MAX_UNREAD_BYTES = 4 * MiB  # written to a client and not yet read by it, for oneway sends


@dataclass(frozen=True)
class RemotingLimits:
    max_frame_bytes: int = 16 * MiB  # RocketMQ's frame limit (com.rocketmq.remoting.frameMaxLength)
    max_connections: int = 4096
    max_requests_per_connection: int = 1024
    max_request_bytes_per_connection: int = 64 * MiB
    max_request_bytes: int = 256 * MiB
    idle_timeout_s: float = 120.0  # RocketMQ closes channels idle for 120 s


class Channel:
    """One client connection: writes frames, sends the server's own requests to the client and
    keeps what the processors attach to it (the client ids that heartbeated on it)."""

    def __init__(self, writer: asyncio.StreamWriter, address: str) -> None:
        self.writer = writer
        self.address = address  # "host:port" of the client
        self._opaques = itertools.count(1)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.requests: dict[int, asyncio.Task[None]] = {}  # opaque -> the task serving that request
        self.client_ids: dict[str, set[str]] = {}  # client id -> consumer groups it joined here
        self.close_callbacks: list[Callable[[Channel], None]] = []

    @property
    def peer(self) -> str:
        """The gRPC-style peer name the processors key connections by."""
        return f"ipv4:{self.address}"

    @property
    def closed(self) -> bool:
        return self.writer.is_closing()

    async def write(self, command: RemotingCommand) -> None:
        if self.closed:
            return
        self.writer.write(command.encode())
        await self.writer.drain()

    def send_oneway(self, command: RemotingCommand) -> None:
        """Send a request to the client without waiting for an answer (from the event loop); dropped
        (logged) while the client leaves more than MAX_UNREAD_BYTES unread, so a client that does
        not read cannot make the broker buffer notifications without end."""
        command.opaque = next(self._opaques)
        command.flag |= RPC_ONEWAY
        if self.closed:
            return
        if self.writer.transport.get_write_buffer_size() > MAX_UNREAD_BYTES:
            log.warning(
                "remoting: %s does not read: request code %d to it dropped", self.address, command.code
            )
            return
        self.writer.write(command.encode())

    async def invoke(self, command: RemotingCommand, timeout_s: float) -> RemotingCommand:
        """Send a request to the client and wait for its response (TimeoutError)."""
        command.opaque = next(self._opaques)
        future = asyncio.get_running_loop().create_future()
        self._pending[command.opaque] = future
        try:
            await self.write(command)
            return await asyncio.wait_for(future, timeout_s)
        finally:
            self._pending.pop(command.opaque, None)

    def answered(self, response: RemotingCommand) -> None:
        future = self._pending.get(response.opaque)
        if future is not None and not future.done():
            future.set_result(response)


class CallContext:
    """What the broker's processors ask of a call (peer, done callbacks), for one request."""

    client_protocol = rmq_pb2.CLIENT_PROTOCOL_REMOTING   # how group members reached the broker

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._callbacks: list[Callable[[object], None]] = []

    def peer(self) -> str:
        return self.channel.peer

    def add_done_callback(self, callback: Callable[[object], None]) -> None:
        self._callbacks.append(callback)

    def done(self) -> None:
        for callback in self._callbacks:
            callback(self)


class RemotingProcessor(Protocol):
    def process(
        self, context: CallContext, request: RemotingCommand
    ) -> Awaitable[RemotingCommand | None]: ...


class RemotingServer:
    def __init__(
        self,
        listen: str,
        processor: RemotingProcessor,
        limits: RemotingLimits = RemotingLimits(),
        tls: ServerTls | None = None,
        sock: socket.socket | None = None,
    ) -> None:
        """`sock`: a socket bound to `listen` already (served instead of binding `listen`)."""
        self.listen = listen
        self._sock = sock
        self.tls = tls
        self.processor = processor
        self.limits = limits
        self.channels: set[Channel] = set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.request_bytes = RequestBytes(limits.max_request_bytes, limits.max_request_bytes_per_connection)

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self) -> None:
        host, _, port = self.listen.rpartition(":")
        context = None if self.tls is None else server_ssl_context(self.tls)
        if self._sock is not None:
            self._server = await asyncio.start_server(self._serve, sock=self._sock, limit=64 * 1024,
                                                      ssl=context)
            return
        self._server = await asyncio.start_server(
            self._serve, host.strip("[]"), int(port), limit=64 * 1024, ssl=context
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for channel in list(self.channels):
            channel.writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coroutine: Awaitable[None]) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("?", 0)
        channel = Channel(writer, f"{peer[0]}:{peer[1]}")
        if len(self.channels) >= self.limits.max_connections:
            log.warning(
                "remoting: refusing connection from %s: %d connections already (max_connections)",
                channel.address,
                len(self.channels),
            )
            writer.close()
            return
        self.channels.add(channel)
        try:
            await self._read_commands(reader, channel)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except FrameError as error:
            log.warning("remoting: closing connection from %s: %s", channel.address, error)
        finally:
            self.channels.discard(channel)
            writer.close()
            for callback in channel.close_callbacks:
                callback(channel)

    async def _read_commands(self, reader: asyncio.StreamReader, channel: Channel) -> None:
        slots = asyncio.Semaphore(self.limits.max_requests_per_connection)
        while True:
            # asyncio.timeout, not wait_for: no task and no extra loop turn per read (a frame in the
            # buffer already is read at once)
            async with asyncio.timeout(self.limits.idle_timeout_s):
                prefix = await reader.readexactly(LENGTH.size)
            length = LENGTH.unpack(prefix)[0]
            if not 4 <= length <= self.limits.max_frame_bytes:
                raise FrameError(
                    f"frame length {length} is outside 4..{self.limits.max_frame_bytes} (max_frame_bytes)"
                )
            await self.request_bytes.acquire(channel, length)
            try:
                async with asyncio.timeout(self.limits.idle_timeout_s):
                    payload = await reader.readexactly(length)
                command = decode(payload)
            except BaseException:
                self.request_bytes.release(channel, length)
                raise
            if command.is_response:
                self.request_bytes.release(channel, length)
                channel.answered(command)
                continue
            if command.code == RequestCode.CANCEL_REQUEST:
                self.request_bytes.release(channel, length)
                _cancel(channel, command)
                continue
            await slots.acquire()
            task = self._spawn(self._handle(channel, command))
            channel.requests[command.opaque] = task
            task.add_done_callback(functools.partial(self._finished, channel, length, slots, command.opaque))

    def _finished(
        self, channel: Channel, size: int, slots: asyncio.Semaphore, opaque: int, task: asyncio.Task[None]
    ) -> None:
        slots.release()
        self.request_bytes.release(channel, size)
        if channel.requests.get(opaque) is task:
            del channel.requests[opaque]

    async def _handle(self, channel: Channel, request: RemotingCommand) -> None:
        context = CallContext(channel)
        try:
            try:
                response = await self.processor.process(context, request)
            except Exception as error:
                log.exception("remoting: request code %d failed", request.code)
                response = request.response(ResponseCode.SYSTEM_ERROR, f"internal error: {error}")
            if response is not None and not request.is_oneway:
                with contextlib.suppress(ConnectionError):
                    await channel.write(response)
        finally:
            context.done()


def _cancel(channel: Channel, command: RemotingCommand) -> None:
    opaque = command.ext_fields.get(CANCELLED_OPAQUE, "")
    task = channel.requests.get(int(opaque)) if opaque.isdigit() else None
    if task is not None:
        task.cancel()


def server_ssl_context(tls: ServerTls) -> ssl.SSLContext:
    """The listener's TLS: the broker's certificate; client certificates required (and checked
    against the client CA) for mutual TLS."""
    tls.pem_files()   # an unusable file is named, as for the gRPC port
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls.cert_file, tls.key_file)
    if tls.client_ca_file is not None:
        context.load_verify_locations(tls.client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


@dataclass
class ConnectionTable:
    """Remoting channels by consumer client id, for the server's own requests to clients."""

    by_client: dict[str, Channel] = field(default_factory=dict)

    def register(self, channel: Channel, client_id: str, group: str) -> None:
        self.by_client[client_id] = channel
        channel.client_ids.setdefault(client_id, set()).add(group)

    def forget(self, channel: Channel) -> None:
        for client_id in channel.client_ids:
            if self.by_client.get(client_id) is channel:
                del self.by_client[client_id]
