"""The remoting listener (RocketMQ NettyRemotingServer, docs/remoting-protocol.md "Frames"): an
asyncio TCP server (an `asyncio.Protocol` per connection) reading length-prefixed RemotingCommand
frames as they arrive, serving each request and writing its response under the request's opaque;
oneway requests get none. A request is run at once, inside the read (`_Connection._start`): one that its
processor answers without waiting (a send the store puts on the event loop, a pull answered from
memory, a route) is answered before the read returns; one that waits (a held pull, a put on the
store's thread, an admin call to a client) goes on in a task from where it waited. Responses from
a client (to requests the server sent it) complete the server's waiting call.
A CANCEL_REQUEST (rmq's own code, oneway) ends the request of that connection whose opaque it
names, unanswered: a held pull its client no longer wants leaves the hold table at once, as a
cancelled gRPC call does. It reaches only the connection's own requests, so it needs no ACL.

Bounded (`RemotingLimits`): a frame longer than max_frame_bytes, a length prefix below 4 or a
header that does not decode closes the connection (the prefix is checked before any of the frame
is kept); past max_connections a new connection is closed at once; a connection runs at most
max_requests_per_connection requests at a time, and request frames read and not yet answered
hold at most max_request_bytes_per_connection on one connection and max_request_bytes in all
(request_bytes); while either bound is reached the connection is not read (its transport paused),
so the socket's buffers, not the broker, hold what the client sends on; a connection silent for
idle_timeout_s is closed (a timer of the loop, not counting time the broker itself stopped
reading). Writes have back-pressure: while the client leaves more than the transport's high-water
mark unread, a response waits (`Channel.write`) instead of buffering, and oneway sends past
MAX_UNREAD_BYTES are dropped.

A broker serving TLS (`--tls-cert`) serves it on this port too, with the same certificate and,
for mutual TLS, the same client CA (RocketMQ's tls.enable on the remoting server)."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import itertools
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Coroutine, Generator
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

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

    def __init__(self, transport: asyncio.Transport, address: str) -> None:
        self.transport = transport
        self.address = address  # "host:port" of the client
        self._opaques = itertools.count(1)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.requests: dict[int, asyncio.Task[None]] = {}  # opaque -> the task serving that request
        self.client_ids: dict[str, set[str]] = {}  # client id -> consumer groups it joined here
        self.close_callbacks: list[Callable[[Channel], None]] = []
        self._drain_waiters: list[asyncio.Future[None]] | None = None  # a list while writing is paused

    @property
    def peer(self) -> str:
        """The gRPC-style peer name the processors key connections by."""
        return f"ipv4:{self.address}"

    @property
    def closed(self) -> bool:
        return self.transport.is_closing()

    async def write(self, command: RemotingCommand) -> None:
        """Write a frame; while the client leaves more than the transport's high-water mark unread,
        wait until it reads (ConnectionResetError if the connection goes meanwhile)."""
        if self.closed:
            return
        self.transport.write(command.encode())
        if self._drain_waiters is not None:
            waiter = asyncio.get_running_loop().create_future()
            self._drain_waiters.append(waiter)
            await waiter

    def send_oneway(self, command: RemotingCommand) -> None:
        """Send a request to the client without waiting for an answer (from the event loop); dropped
        (logged) while the client leaves more than MAX_UNREAD_BYTES unread, so a client that does
        not read cannot make the broker buffer notifications without end."""
        command.opaque = next(self._opaques)
        command.flag |= RPC_ONEWAY
        if self.closed:
            return
        if self.transport.get_write_buffer_size() > MAX_UNREAD_BYTES:
            log.warning(
                "remoting: %s does not read: request code %d to it dropped", self.address, command.code
            )
            return
        self.transport.write(command.encode())

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

    def pause_writing(self) -> None:
        if self._drain_waiters is None:
            self._drain_waiters = []

    def resume_writing(self, error: Exception | None = None) -> None:
        """The client reads again (or, with `error`, is gone): the writes waiting go on."""
        waiters, self._drain_waiters = self._drain_waiters or [], None
        for waiter in waiters:
            if waiter.done():
                continue
            if error is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(error)


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
        loop = asyncio.get_running_loop()
        context = None if self.tls is None else server_ssl_context(self.tls)
        connection = functools.partial(_Connection, self, loop)
        if self._sock is not None:
            self._server = await loop.create_server(connection, sock=self._sock, ssl=context)
            return
        host, _, port = self.listen.rpartition(":")
        self._server = await loop.create_server(connection, host.strip("[]"), int(port), ssl=context)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for channel in list(self.channels):
            channel.transport.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def spawn(self, coroutine: Coroutine[Any, Any, None], context: contextvars.Context) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coroutine, context=context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def handle(self, channel: Channel, request: RemotingCommand) -> None:
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


class _Rest(Coroutine[Any, Any, None]):
    """The rest of a request's coroutine, run inside the read until it first waited (yielding
    `waiting`, the future it waits on): a task drives it on, its first step waiting on that."""

    def __init__(self, coroutine: Coroutine[Any, Any, None], waiting: Any) -> None:
        self._coroutine = coroutine
        self._waiting = waiting
        self._started = False

    def send(self, value: Any) -> Any:
        if self._started:
            return self._coroutine.send(value)
        self._started = True
        waiting, self._waiting = self._waiting, None
        return waiting

    def throw(self, *error: Any) -> Any:
        self._started = True   # a task cancelled before its first step cancels the coroutine's wait
        return self._coroutine.throw(*error)

    def close(self) -> None:
        self._coroutine.close()

    def __next__(self) -> Any:
        return self.send(None)

    def __iter__(self) -> _Rest:
        return self

    def __await__(self) -> Generator[Any, None, None]:
        return self


class _Connection(asyncio.Protocol):
    """One connection's reading: frames parsed from the bytes as they arrive, each request run at
    once (`_start`), reading paused while a bound is reached."""

    def __init__(self, server: RemotingServer, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.limits = server.limits
        self.loop = loop
        self.channel: Channel | None = None   # None: refused (max_connections)
        self._buffer: bytes | bytearray = b""   # received and not yet parsed
        self._frame = 0   # length of the frame being received, its bytes counted (0: between frames)
        self._queued: tuple[RemotingCommand, int] | None = None   # a request read while no slot was free
        self._running = 0   # requests being served
        self._blocked = False   # a bound stopped the parsing (reading is paused)
        self._paused = False
        self._last_read = 0.0
        self._idle: asyncio.TimerHandle | None = None

    # -- transport callbacks ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)   # uvloop's TCPTransport is not a subclass
        peer = transport.get_extra_info("peername") or ("?", 0)
        channel = Channel(transport, f"{peer[0]}:{peer[1]}")
        if len(self.server.channels) >= self.limits.max_connections:
            log.warning(
                "remoting: refusing connection from %s: %d connections already (max_connections)",
                channel.address,
                len(self.server.channels),
            )
            transport.close()
            return
        self.channel = channel
        self.server.channels.add(channel)
        self._last_read = self.loop.time()
        self._idle = self.loop.call_later(self.limits.idle_timeout_s, self._check_idle)

    def data_received(self, data: bytes) -> None:
        if self.channel is None:
            return
        self._last_read = self.loop.time()
        if self._buffer:
            self._buffer += data   # a bytearray (below): frames split over reads grow it in place
        else:
            self._buffer = data
        self._read_frames(self.channel)

    def pause_writing(self) -> None:
        if self.channel is not None:
            self.channel.pause_writing()

    def resume_writing(self) -> None:
        if self.channel is not None:
            self.channel.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        channel = self.channel
        if channel is None:
            return
        if self._idle is not None:
            self._idle.cancel()
        self.server.channels.discard(channel)
        self.server.request_bytes.forget(channel)
        if self._frame:
            self.server.request_bytes.release(channel, self._frame)
            self._frame = 0
        if self._queued is not None:
            self.server.request_bytes.release(channel, self._queued[1])
            self._queued = None
        channel.resume_writing(ConnectionResetError("connection lost"))
        for callback in channel.close_callbacks:
            callback(channel)

    # -- frames ----------------------------------------------------------------------------
    def _read_frames(self, channel: Channel) -> None:
        buffer, at = self._buffer, 0
        try:
            while not (self._blocked or channel.closed):
                if not self._frame:
                    if len(buffer) - at < LENGTH.size:
                        break
                    length = LENGTH.unpack_from(buffer, at)[0]
                    if not 4 <= length <= self.limits.max_frame_bytes:
                        most = self.limits.max_frame_bytes
                        self._close(channel, f"frame length {length} is outside 4..{most} (max_frame_bytes)")
                        return
                    if not self.server.request_bytes.try_acquire(channel, length):
                        self.server.request_bytes.wait(channel, self._wake)
                        self._block()
                        break
                    self._frame = length
                end = at + LENGTH.size + self._frame
                if len(buffer) < end:
                    break
                payload = bytes(buffer[at + LENGTH.size : end])
                at, length, self._frame = end, self._frame, 0
                self._received(channel, payload, length)
        finally:
            rest = buffer[at:] if at else buffer
            self._buffer = bytearray(rest) if rest and isinstance(rest, bytes) else rest

    def _received(self, channel: Channel, payload: bytes, length: int) -> None:
        try:
            command = decode(payload)
        except FrameError as error:
            self.server.request_bytes.release(channel, length)
            self._close(channel, str(error))
            return
        if command.is_response:
            self.server.request_bytes.release(channel, length)
            channel.answered(command)
        elif command.code == RequestCode.CANCEL_REQUEST:
            self.server.request_bytes.release(channel, length)
            _cancel(channel, command)
        elif self._running >= self.limits.max_requests_per_connection:
            self._queued = (command, length)
            self._block()
        else:
            self._start(channel, command, length)

    def _start(self, channel: Channel, request: RemotingCommand, length: int) -> None:
        """Run the request until it waits: answered already, or its rest goes on in a task. It runs
        in a context of its own (the caller the ACL set for it stays its own)."""
        self._running += 1
        context = contextvars.copy_context()
        coroutine = self.server.handle(channel, request)
        try:
            waiting = context.run(coroutine.send, None)
        except StopIteration:
            self._finished(channel, length)
            return
        except BaseException:
            self._finished(channel, length)
            raise
        task = self.server.spawn(_Rest(coroutine, waiting), context)
        channel.requests[request.opaque] = task
        task.add_done_callback(functools.partial(self._task_finished, channel, length, request.opaque))

    def _task_finished(self, channel: Channel, length: int, opaque: int, task: asyncio.Task[None]) -> None:
        if channel.requests.get(opaque) is task:
            del channel.requests[opaque]
        self._finished(channel, length)

    def _finished(self, channel: Channel, length: int) -> None:
        self._running -= 1
        self.server.request_bytes.release(channel, length)
        if self._queued is not None:
            self._wake()

    # -- bounds ----------------------------------------------------------------------------
    def _block(self) -> None:
        self._blocked = True
        if not self._paused:
            self._paused = True
            assert self.channel is not None
            self.channel.transport.pause_reading()

    def _wake(self) -> None:
        self.loop.call_soon(self._unblock)

    def _unblock(self) -> None:
        """Go on parsing (a slot or bytes were released), reading again unless a bound stops it."""
        channel = self.channel
        if not self._blocked or channel is None or channel.closed:
            return
        if self._queued is not None:
            if self._running >= self.limits.max_requests_per_connection:
                return
            (request, length), self._queued = self._queued, None
            self._blocked = False
            self._start(channel, request, length)
        self._blocked = False
        self._read_frames(channel)
        if not self._blocked and self._paused:
            self._paused = False
            channel.transport.resume_reading()

    def _check_idle(self) -> None:
        channel = self.channel
        if channel is None or channel.closed:
            return
        now = self.loop.time()
        if self._blocked:   # the broker stopped reading: the client is not idle
            self._last_read = now
        left = self._last_read + self.limits.idle_timeout_s - now
        if left > 0:
            self._idle = self.loop.call_later(left, self._check_idle)
            return
        log.debug("remoting: closing connection from %s: idle for %.0f s", channel.address,
                  self.limits.idle_timeout_s)
        channel.transport.close()

    def _close(self, channel: Channel, reason: str) -> None:
        log.warning("remoting: closing connection from %s: %s", channel.address, reason)
        channel.transport.close()


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
