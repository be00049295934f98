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

Read header first (`RemotingLimits`; docs/remoting-protocol.md "Reading a frame"): a frame's length
prefix, header-length word and header (at most max_header_bytes, arriving within header_timeout_s
of the frame's first byte) are read before anything is reserved for it; the header then goes to the
gate (`HeaderGate`: the dispatcher's ACL check of the signature, the caller's address and the field
values), and only an admitted frame is counted against the request-byte budget (request_bytes: per
connection, per account and in all) and its body kept. A refused header is answered at once and its
body dropped as it arrives. So a caller without an account reserves nothing, and slow or stuck
frames of one account hold only that account's share. A frame longer than max_frame_bytes, a length
prefix below 4, a header over its bound or one that does not decode closes the connection (one line
in a log bounded by rate); past max_connections, or max_connections_per_address from one address, a
new connection is closed at once; a connection none of whose requests was admitted within
admission_timeout_s is closed. A connection runs at most max_requests_per_connection requests at a
time; while a bound is reached the connection is not read (its transport paused), so the socket's
buffers, not the broker, hold what the client sends on; a connection silent for idle_timeout_s is
closed (a timer of the loop, not counting time the broker itself stopped reading). Writes have
back-pressure: while the client leaves more than the transport's high-water mark unread, a response
waits (`Channel.write`) instead of buffering, and oneway sends and refusals past MAX_UNREAD_BYTES
are dropped.

A broker serving TLS (`--tls-cert`) serves it on this port too, with the same certificate and,
for mutual TLS, the same client CA (RocketMQ's tls.enable on the remoting server)."""

from __future__ import annotations

import asyncio
import collections
import contextvars
import functools
import itertools
import logging
import socket
import ssl
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from rmq.broker_server.remoting.request_bytes import RequestBytes
from rmq.broker_server.security.refusal_log import RefusalLog
from rmq.broker_server.security.tls import ServerTls
from rmq.remoting.remoting_command import (
    HEADER_LENGTH_MASK,
    LENGTH,
    RPC_ONEWAY,
    RPC_TYPE_RESPONSE,
    FrameError,
    LanguageCode,
    RemotingCommand,
    decode_header,
)
from rmq.remoting.request_code import CANCELLED_OPAQUE, RequestCode, ResponseCode
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)
KiB = 1024
MiB = 1024 * KiB
MAX_UNREAD_BYTES = 4 * MiB  # written to a client and not yet read by it, for oneway sends and refusals
PREFIX = LENGTH.size * 2   # the frame length, then the header-length word
MAX_OPAQUE_DIGITS = 10   # an opaque is a Java int
# Requests one connection starts per turn of the event loop. A client that writes frames faster
# than they are served (not reading its answers, say) would otherwise hold the loop for a whole
# read's worth (uvloop reads 256 KiB: ~1,000 single sends, ~150 ms) while every other connection
# waits; after this many its parsing goes on at the next turn, after the others' (issue 41's flood).
# A lone request per read never reaches it.
REQUESTS_PER_TURN = 1


@dataclass(frozen=True)
class RemotingLimits:
    max_frame_bytes: int = 16 * MiB  # RocketMQ's frame limit (com.rocketmq.remoting.frameMaxLength)
    # read before anything is admitted: a single send's properties (32 KiB, JSON-escaped) travel here
    max_header_bytes: int = 256 * KiB
    max_connections: int = 4096
    max_connections_per_address: int = 1024
    max_requests_per_connection: int = 1024
    max_request_bytes_per_connection: int = 64 * MiB
    max_request_bytes_per_account: int = 64 * MiB
    max_request_bytes: int = 256 * MiB
    idle_timeout_s: float = 120.0  # RocketMQ closes channels idle for 120 s
    header_timeout_s: float = 10.0   # from a frame's first byte to its whole header
    admission_timeout_s: float = 10.0   # from connecting to a first request admitted (authenticated)


class Channel:
    """One client connection: writes frames, sends the server's own requests to the client and
    keeps what the processors attach to it (the client ids that heartbeated on it)."""

    def __init__(self, transport: asyncio.Transport, address: str) -> None:
        self.transport = transport
        self.address = address  # "host:port" of the client
        self.peer = f"ipv4:{address}"   # the gRPC-style peer name the processors key connections by
        self.host = address.rpartition(":")[0]   # without the port: what ACL address checks and
        # per-address bounds see
        self._opaques = itertools.count(1)
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self.requests: dict[int, asyncio.Task[None]] = {}  # opaque -> the task serving that request
        self.client_ids: dict[str, set[str]] = {}  # client id -> consumer groups it joined here
        self.language = LanguageCode.JAVA   # the client's, from its heartbeats
        self.close_callbacks: list[Callable[[Channel], None]] = []
        self._drain_waiters: list[asyncio.Future[None]] | None = None  # a list while writing is paused

    @property
    def closed(self) -> bool:
        return self.transport.is_closing()

    def write_now(self, command: RemotingCommand) -> bool:
        """Write a frame without waiting; False (nothing written) while the client leaves more
        than MAX_UNREAD_BYTES unread."""
        if self.closed or self.transport.get_write_buffer_size() > MAX_UNREAD_BYTES:
            return False
        self.transport.write(command.encode())
        return True

    async def write(self, command: RemotingCommand) -> None:
        """Write a frame; while the client leaves more than the transport's high-water mark unread,
        wait until it reads (ConnectionResetError if the connection goes meanwhile)."""
        if not self.write_frame(command):
            await self.drained()

    def write_frame(self, command: RemotingCommand) -> bool:
        """`write` as a plain call (an answer on the per-request path): False when the client
        leaves more than the high-water mark unread, and the writer is to await `drained`."""
        if self.transport.is_closing():
            return True
        self.transport.write(command.encode())
        return self._drain_waiters is None

    def drained(self) -> asyncio.Future[None]:
        """A future done once the client reads again (ConnectionResetError if it goes)."""
        waiter = asyncio.get_running_loop().create_future()
        if self._drain_waiters is None:
            waiter.set_result(None)
        else:
            self._drain_waiters.append(waiter)
        return waiter

    def send_oneway(self, command: RemotingCommand) -> None:
        """Send a request to the client without waiting for an answer (from the event loop); dropped
        (logged) while the client leaves more than MAX_UNREAD_BYTES unread, so a client that does
        not read cannot make the broker buffer notifications without end."""
        command.opaque = next(self._opaques)
        command.flag |= RPC_ONEWAY
        if not self.write_now(command) and not self.closed:
            log.warning(
                "remoting: %s does not read: request code %d to it dropped", self.address, command.code
            )

    def awaits(self, opaque: int) -> bool:
        """Whether a request the server sent under `opaque` waits for its response."""
        return opaque in self._pending

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

    def __init__(self, channel: Channel, admission: Admission | None = None) -> None:
        self.channel = channel
        self.admission = admission   # what the gate found in the request's header
        self.callbacks: list[Callable[[object], None]] = []   # run by `done`

    def peer(self) -> str:
        return self.channel.peer

    def add_done_callback(self, callback: Callable[[object], None]) -> None:
        self.callbacks.append(callback)

    def done(self) -> None:
        for callback in self.callbacks:
            callback(self)


@dataclass(frozen=True)
class Admission:
    """A request header the gate admitted: its body may be read, counted in `account`'s share."""

    account: str   # an access key; without an ACL the client's address
    proof: object = None   # what the gate checked, for the processor to finish with the body


class HeaderGate(Protocol):
    def admit_header(self, channel: Channel, header: RemotingCommand) -> Admission | RemotingCommand:
        """The admission to read the body of the request `header` (its body not read yet), or
        the answer refusing it."""
        ...


class OpenGate:
    """Every request admitted, counted against its client's address (a server without an ACL)."""

    def admit_header(self, channel: Channel, header: RemotingCommand) -> Admission | RemotingCommand:
        return Admission(channel.host)


class RemotingProcessor(Protocol):
    def process(
        self, context: CallContext, request: RemotingCommand
    ) -> Awaitable[RemotingCommand | None]: ...


# A processor's answer to a request on the read itself, without a coroutine, or None when it
# leaves the request to `process` (BrokerRemotingProcessor.immediate: a plain single send).
Immediate = Callable[[CallContext, RemotingCommand], RemotingCommand | None]


class RemotingServer:
    def __init__(
        self,
        listen: str,
        processor: RemotingProcessor,
        limits: RemotingLimits = RemotingLimits(),
        tls: ServerTls | None = None,
        sock: socket.socket | None = None,
        gate: HeaderGate | None = None,
        immediate: Mapping[int, Immediate] | None = None,
    ) -> None:
        """`sock`: a socket bound to `listen` already (served instead of binding `listen`);
        `gate`: what admits a request's header before its body is read (OpenGate when None);
        `immediate`: by request code, what answers a request of that code on the read, before
        `processor` (a request of any other code goes straight to `processor`: no call)."""
        self.listen = listen
        self._sock = sock
        self.tls = tls
        self.processor = processor
        self.immediate: Mapping[int, Immediate] = immediate or {}
        self.gate: HeaderGate = gate or OpenGate()
        self.limits = limits
        self.channels: set[Channel] = set()
        self.by_address: collections.Counter[str] = collections.Counter()
        self.refusals = RefusalLog()   # closed connections and refused frames: lines bounded by rate
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.request_bytes = RequestBytes(limits.max_request_bytes, limits.max_request_bytes_per_connection,
                                          limits.max_request_bytes_per_account)

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

    async def handle(self, channel: Channel, request: RemotingCommand, admission: Admission) -> None:
        context = CallContext(channel, admission)
        try:
            try:
                response = await self.processor.process(context, request)
            except Exception as error:
                response = failed(request, error)
            if response is not None and not request.flag & RPC_ONEWAY:
                try:
                    if not channel.write_frame(response):   # a plain call unless the client does not read
                        await channel.drained()
                except ConnectionError:
                    pass
        finally:
            context.done()


def failed(request: RemotingCommand, error: Exception) -> RemotingCommand:
    """The answer to a request whose processor raised (logged with its traceback)."""
    log.exception("remoting: request code %d failed", request.code)
    return request.response(ResponseCode.SYSTEM_ERROR, f"internal error: {error}")


async def _drained(channel: Channel) -> None:
    """Until the client reads what was written to it (or is gone)."""
    try:
        await channel.drained()
    except ConnectionError:
        pass


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


@dataclass
class _Body:
    """An admitted request whose body (`size` bytes) is being received; `reserved` once its
    frame's `length` is counted in request_bytes."""

    request: RemotingCommand
    admission: Admission
    length: int
    size: int
    reserved: bool = False


class _Connection(asyncio.Protocol):
    """One connection's reading: each frame's header parsed and admitted, then its body received,
    each request run at once (`_start`), reading paused while a bound is reached. Every byte counted
    in request_bytes is held by exactly one of `_body` (reserved), `_queued` or a running request,
    and released when that one ends or the connection is lost."""

    def __init__(self, server: RemotingServer, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.limits = server.limits
        self.loop = loop
        self.channel: Channel | None = None   # None: refused (max_connections)
        self._buffer: bytes | bytearray = b""   # received and not yet parsed
        self._body: _Body | None = None   # the admitted request whose body is being received
        self._discard = 0   # bytes of a refused frame's body still to drop as they arrive
        self._queued: _Body | None = None   # a request read while no slot was free (its bytes reserved)
        self._running = 0   # requests being served
        self._blocked = False   # a bound stopped the parsing (reading is paused)
        self._paused = False
        self._admitted = False   # a request of this connection was admitted
        self._last_read = 0.0
        self._idle: asyncio.TimerHandle | None = None
        self._header_late: asyncio.TimerHandle | None = None   # a frame's header began and is not whole
        self._unadmitted: asyncio.TimerHandle | None = None   # until a first request is admitted

    # -- transport callbacks ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)   # uvloop's TCPTransport is not a subclass
        peer = transport.get_extra_info("peername") or ("?", 0)
        channel = Channel(transport, f"{peer[0]}:{peer[1]}")
        refusal = self._refusal(channel)
        if refusal:
            self.server.refusals.record("remoting connection", channel.address, "REFUSED", refusal)
            transport.close()
            return
        self.channel = channel
        self.server.channels.add(channel)
        self.server.by_address[channel.host] += 1
        self._last_read = self.loop.time()
        self._idle = self.loop.call_later(self.limits.idle_timeout_s, self._check_idle)
        self._unadmitted = self.loop.call_later(self.limits.admission_timeout_s, self._check_admitted)

    def _refusal(self, channel: Channel) -> str:
        if len(self.server.channels) >= self.limits.max_connections:
            return f"{len(self.server.channels)} connections already (max_connections)"
        if self.server.by_address[channel.host] >= self.limits.max_connections_per_address:
            return (f"{self.server.by_address[channel.host]} connections from {channel.host} already "
                    f"(max_connections_per_address)")
        return ""

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
        for timer in (self._idle, self._header_late, self._unadmitted):
            if timer is not None:
                timer.cancel()
        self.server.channels.discard(channel)
        self.server.by_address[channel.host] -= 1
        if not self.server.by_address[channel.host]:
            del self.server.by_address[channel.host]
        self.server.request_bytes.forget(channel)
        for body in (self._body, self._queued):
            if body is not None and body.reserved:
                self._release(channel, body)
        self._body = self._queued = None
        channel.resume_writing(ConnectionResetError("connection lost"))
        for callback in channel.close_callbacks:
            callback(channel)

    # -- frames ----------------------------------------------------------------------------
    def _read_frames(self, channel: Channel) -> None:
        buffer, at, started = self._buffer, 0, 0
        transport = channel.transport
        try:
            while not (self._blocked or transport.is_closing()):
                if self._discard:
                    dropped = min(self._discard, len(buffer) - at)
                    at += dropped
                    self._discard -= dropped
                    if self._discard:
                        break
                    continue
                if self._body is None:
                    if at == len(buffer):   # every frame read: no call to find that out
                        break
                    if started == REQUESTS_PER_TURN:   # the other connections' turn first
                        self._block()
                        self._wake()
                        break
                    taken = self._read_header(channel, buffer, at)
                else:
                    taken = self._read_body(channel, buffer, at)
                    started += taken is not None
                if taken is None:
                    break
                at += taken
        finally:
            rest = buffer[at:] if at else buffer
            self._buffer = bytearray(rest) if rest and isinstance(rest, bytes) else rest
            if rest:   # a frame's header may have begun (no call per read otherwise)
                self._time_header(channel)

    def _read_header(self, channel: Channel, buffer: bytes | bytearray, at: int) -> int | None:
        """The bytes of the frame's length, header-length word and header, once all are here
        and the header is decoded and seen by the gate; None while they are not (or on a close)."""
        available = len(buffer) - at
        if available < LENGTH.size:
            return None
        length: int = LENGTH.unpack_from(buffer, at)[0]
        if not 4 <= length <= self.limits.max_frame_bytes:
            most = self.limits.max_frame_bytes
            self._close(channel, f"frame length {length} is outside 4..{most} (max_frame_bytes)")
            return None
        if available < PREFIX:
            return None
        mark: int = LENGTH.unpack_from(buffer, at + LENGTH.size)[0]
        header_length = mark & HEADER_LENGTH_MASK
        if header_length > min(length - LENGTH.size, self.limits.max_header_bytes):
            self._close(channel, f"header length {header_length} exceeds the frame ({length} bytes) or "
                                 f"max_header_bytes ({self.limits.max_header_bytes})")
            return None
        if available < PREFIX + header_length:
            return None
        try:
            header = decode_header(mark, bytes(buffer[at + PREFIX : at + PREFIX + header_length]))
        except FrameError as error:
            self._close(channel, str(error))
            return None
        if self._header_late is not None:
            self._header_late.cancel()
            self._header_late = None
        self._admit(channel, header, length, length - LENGTH.size - header_length)
        return PREFIX + header_length

    def _admit(self, channel: Channel, header: RemotingCommand, length: int, size: int) -> None:
        """What becomes of a frame whose header was read: its body received (admitted), or
        dropped as it arrives (a refused request, an unsolicited response, a cancel)."""
        if header.flag & RPC_TYPE_RESPONSE:   # (is_response, without a property call per frame)
            if channel.awaits(header.opaque):
                self._body = _Body(header, Admission(channel.host), length, size)
            else:
                self._discard = size
            return
        if header.code == RequestCode.CANCEL_REQUEST:
            self._discard = size
            self._cancel(channel, header)
            return
        verdict = self.server.gate.admit_header(channel, header)
        if isinstance(verdict, Admission):
            self._admitted = True
            self._body = _Body(header, verdict, length, size)
            return
        self._discard = size
        if not header.is_oneway and not channel.write_now(verdict):
            self._close(channel, "it does not read the refusals of its requests")

    def _read_body(self, channel: Channel, buffer: bytes | bytearray, at: int) -> int | None:
        """The body's bytes once they are counted and all here; None while they are not."""
        body = self._body
        assert body is not None
        if not body.reserved:
            if not self.server.request_bytes.try_acquire(channel, body.admission.account, body.length):
                self.server.request_bytes.wait(channel, self._wake)
                self._block()
                return None
            body.reserved = True
        if len(buffer) - at < body.size:
            return None
        body.request.body = bytes(buffer[at : at + body.size])
        self._body = None
        # what becomes of the frame read, here (no call per frame for it): a response answers the
        # server's own request; a request starts, or waits while the connection runs its most
        if body.request.flag & RPC_TYPE_RESPONSE:
            try:
                channel.answered(body.request)
            finally:
                self._release(channel, body)
        elif self._running >= self.limits.max_requests_per_connection:
            self._queued = body
            self._block()
        else:
            self._start(channel, body)
        return body.size

    def _start(self, channel: Channel, body: _Body) -> None:
        """Answer the request on the read when the server's `immediate` for its code does (its
        bytes released once the answer is written; while the client leaves the high-water mark
        unread, once it reads), else run it until it waits: answered already, or its rest goes on
        in a task."""
        request = body.request
        immediate = self.server.immediate
        if request.code in immediate:   # no call for a code answered only by `process`
            context = CallContext(channel, body.admission)
            try:
                response = immediate[request.code](context, request)
            except Exception as error:
                response = failed(request, error)
            if response is not None:
                written = request.flag & RPC_ONEWAY or channel.write_frame(response)
                if context.callbacks:   # none for a send: no call per request to find that out
                    context.done()
                if written:
                    self.server.request_bytes.release(channel, body.admission.account, body.length)
                else:
                    self._run(channel, body, _drained(channel))
                return
        self._run(channel, body, self.server.handle(channel, request, body.admission))

    def _run(self, channel: Channel, body: _Body, coroutine: Coroutine[Any, Any, None]) -> None:
        """Run the request's coroutine until it waits: done already, or its rest goes on in a
        task. It runs in a context of its own (the caller the ACL set for it stays its own)."""
        self._running += 1
        request = body.request
        context = contextvars.copy_context()
        try:
            waiting = context.run(coroutine.send, None)
        except StopIteration:
            self._finished(channel, body)
            return
        except BaseException:
            self._finished(channel, body)
            raise
        task = self.server.spawn(_Rest(coroutine, waiting), context)
        channel.requests[request.opaque] = task
        task.add_done_callback(functools.partial(self._task_finished, channel, body))

    def _task_finished(self, channel: Channel, body: _Body, task: asyncio.Task[None]) -> None:
        opaque = body.request.opaque
        if channel.requests.get(opaque) is task:
            del channel.requests[opaque]
        self._finished(channel, body)

    def _finished(self, channel: Channel, body: _Body) -> None:
        self._running -= 1
        self._release(channel, body)
        if self._queued is not None:
            self._wake()

    def _release(self, channel: Channel, body: _Body) -> None:
        self.server.request_bytes.release(channel, body.admission.account, body.length)

    def _cancel(self, channel: Channel, command: RemotingCommand) -> None:
        """CANCEL_REQUEST: end the request of this connection whose opaque it names; a field that
        is no request number is refused with one line (bounded by rate), nothing else."""
        opaque = command.ext_fields.get(CANCELLED_OPAQUE, "")
        if not (opaque.isascii() and opaque.isdigit() and len(opaque) <= MAX_OPAQUE_DIGITS):
            self.server.refusals.record("remoting CANCEL_REQUEST", channel.address, "REFUSED",
                                        f"field {CANCELLED_OPAQUE} is not a request number: {opaque[:32]!r}")
            return
        task = channel.requests.get(int(opaque))
        if task is not None:
            task.cancel()

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
            body, self._queued = self._queued, None
            self._blocked = False
            self._start(channel, body)
        self._blocked = False
        self._read_frames(channel)
        if not self._blocked and self._paused:
            self._paused = False
            channel.transport.resume_reading()

    def _time_header(self, channel: Channel) -> None:
        """A frame's header begun and not whole must be whole within header_timeout_s (not
        counting time the broker itself stopped reading: a bound reached)."""
        begun = self._body is None and not self._discard and not self._blocked and bool(self._buffer)
        if begun and self._header_late is None and not channel.closed:
            self._header_late = self.loop.call_later(self.limits.header_timeout_s, self._check_header)

    def _check_header(self) -> None:
        self._header_late = None
        if self.channel is not None and self._body is None and not self._discard and self._buffer:
            self._close(self.channel, f"a frame's header took over {self.limits.header_timeout_s:g} s "
                                      f"(header_timeout_s)")

    def _check_admitted(self) -> None:
        if self.channel is not None and not self._admitted:
            self._close(self.channel, f"no request admitted within {self.limits.admission_timeout_s:g} s "
                                      f"(admission_timeout_s)")

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
        if not channel.closed:
            self.server.refusals.record("remoting connection", channel.address, "CLOSED", reason)
        channel.transport.close()


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
