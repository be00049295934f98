"""The SDK's hot path over the broker's remoting port (RocketMQ NettyRemotingClient;
docs/client-behaviour.md "Transport", docs/remoting-protocol.md): a single-message send and
the consumers' long-polling pulls travel as RemotingCommand frames on one TCP connection per
broker, because a frame written on a plain socket reaches the broker in a fraction of a gRPC
call's time (bench/NOTES.md, issue 29). Everything else stays on gRPC.

A broker that serves the port names it in its route (BrokerMember.remoting_address); RmqClient
uses it then and gRPC otherwise. Requests are signed with rmq's scheme (rmq.remoting.
request_signing) for the member's server id, and the connection uses TLS when the client does.
A connection that cannot be opened makes RmqClient use gRPC for that member for a while.

One reader thread per connection reads answers and completes the waiting call: a blocking
send wakes on its event, a pull's callback runs on the reader thread (as gRPC runs it on its
own). A call not answered by its deadline fails with RmqUnavailable; a cancelled pull tells the
broker (CANCEL_REQUEST), which lets the held pull go."""

from __future__ import annotations

import contextlib
import itertools
import logging
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, cast

from rmq import message_format as mf
from rmq.auth import Credentials, TlsSettings
from rmq.connector.errors import CorruptMessagesError, RequestCancelled, RmqError, RmqUnavailable
from rmq.connector.pull_result import PullResult
from rmq.message_queue import MessageQueue
from rmq.remoting import request_signing
from rmq.remoting.remoting_command import (
    LENGTH,
    RPC_ONEWAY,
    FrameError,
    LanguageCode,
    RemotingCommand,
    SerializeType,
    decode,
)
from rmq.remoting.request_code import CANCELLED_OPAQUE, RMQ_CODE_FIELD, RequestCode, ResponseCode
from rmq.statuses import GetMessageStatus, PullStatus
from rmq.subscription import MessageSelector
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)
MAX_FRAME_BYTES = 64 * 1024 * 1024
READ_BYTES = 256 * 1024
DEADLINE_CHECK_S = 0.5          # how often the reader looks for calls past their deadline
# Calls one connection carries at once; more go over gRPC. The broker serves at most 1024 per
# connection (RemotingLimits.max_requests_per_connection) and stops reading past that, which
# would also hold back the sends and cancels behind them.
MAX_IN_FLIGHT = 512
CONNECT_TIMEOUT_S = 3.0         # a port that does not accept by then is passed over (gRPC is used)
RECORD_SIZE = struct.Struct(">i")   # a CommitLog record starts with its total size
# Requests (and so their answers) carry RocketMQ's binary header, not JSON: about half the
# Python to write and to read on both sides (RocketMQSerializable; bench/NOTES.md, issue 41)
HEADER_ENCODING = SerializeType.ROCKETMQ

# RocketMQ response codes as rmq.v1 codes (the broker's RESPONSE_CODES read backwards).
STATUS_CODES: dict[int, rmq_pb2.Code] = {
    ResponseCode.SUCCESS: rmq_pb2.OK,
    ResponseCode.SYSTEM_ERROR: rmq_pb2.SYSTEM_ERROR,
    ResponseCode.SYSTEM_BUSY: rmq_pb2.LIMIT_EXCEEDED,
    ResponseCode.FLUSH_DISK_TIMEOUT: rmq_pb2.FLUSH_DISK_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: rmq_pb2.SLAVE_NOT_AVAILABLE,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: rmq_pb2.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.MESSAGE_ILLEGAL: rmq_pb2.MESSAGE_ILLEGAL,
    ResponseCode.SERVICE_NOT_AVAILABLE: rmq_pb2.SERVICE_NOT_AVAILABLE,
    ResponseCode.NO_PERMISSION: rmq_pb2.NO_PERMISSION,
    ResponseCode.TOPIC_NOT_EXIST: rmq_pb2.TOPIC_NOT_EXIST,
    ResponseCode.QUERY_NOT_FOUND: rmq_pb2.QUERY_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: rmq_pb2.SUBSCRIPTION_PARSE_FAILED,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: rmq_pb2.SUBSCRIPTION_GROUP_NOT_EXIST,
}
# A PULL_MESSAGE answer's code is its pull status, and the store status the gRPC port names with it.
PULL_STATUSES: dict[int, tuple[PullStatus, GetMessageStatus]] = {
    ResponseCode.SUCCESS: (PullStatus.FOUND, GetMessageStatus.FOUND),
    ResponseCode.PULL_NOT_FOUND: (PullStatus.NO_NEW_MSG, GetMessageStatus.OFFSET_OVERFLOW_ONE),
    ResponseCode.PULL_RETRY_IMMEDIATELY: (PullStatus.NO_MATCHED_MSG, GetMessageStatus.NO_MATCHED_MESSAGE),
    ResponseCode.PULL_OFFSET_MOVED: (PullStatus.OFFSET_ILLEGAL, GetMessageStatus.OFFSET_OVERFLOW_BADLY),
}

class PortUnreachable(RmqUnavailable):
    """The remoting port could not be connected to: nothing was sent (RmqClient uses gRPC)."""


class ConnectionBusy(PortUnreachable):
    """The connection carries MAX_IN_FLIGHT calls already: nothing was sent (this call uses gRPC)."""


class SendableMessage(Protocol):
    """What a single-message send carries (rmq.connector.client.OutgoingMessage)."""

    body: bytes
    tags: str
    keys: str
    properties: Mapping[str, str]
    queue_id: int | None
    delay_level: int
    flag: int


@dataclass(slots=True)   # not frozen: a frozen init costs a setattr call per field
class PullSpec:
    """One pull as the consumer asks for it (PullSysFlag.buildSysFlag, spec pull §10.3): the
    PULL_MESSAGE header is written from it directly, the protobuf request only for gRPC."""

    group: str
    topic: str
    queue_id: int
    offset: int
    max_messages: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_ms: int
    expression: str
    expression_type: int        # rmq_pb2.ExpressionType

    @classmethod
    def of(cls, mq: MessageQueue, offset: int, max_messages: int, group: str,
           sub_expression: str | MessageSelector, suspend_timeout_ms: int, commit_offset: int | None
           ) -> PullSpec:
        flags: int = rmq_pb2.FLAG_SUBSCRIPTION
        if suspend_timeout_ms > 0:
            flags |= rmq_pb2.FLAG_SUSPEND
        if commit_offset is not None:
            flags |= rmq_pb2.FLAG_COMMIT_OFFSET
        selector = sub_expression if isinstance(sub_expression, MessageSelector) else None
        return cls(group, mq.topic, mq.queue_id, offset, max_messages, flags, commit_offset or 0,
                   max(suspend_timeout_ms, 0), selector.expression if selector else str(sub_expression),
                   selector.expression_type if selector else rmq_pb2.TAG)

    def to_request(self, max_bytes: int = 0) -> rmq_pb2.PullMessageRequest:
        return rmq_pb2.PullMessageRequest(
            consumer_group=self.group, topic=self.topic, queue_id=self.queue_id, queue_offset=self.offset,
            max_messages=self.max_messages, max_bytes=max_bytes, sys_flag=self.sys_flag,
            suspend_timeout_ms=self.suspend_timeout_ms, commit_offset=self.commit_offset,
            sub_expression=self.expression,
            expression_type=cast(rmq_pb2.ExpressionType, self.expression_type))   # wire values

    def header(self) -> dict[str, str]:
        """The PULL_MESSAGE request's extFields."""
        return {"consumerGroup": self.group, "topic": self.topic, "queueId": str(self.queue_id),
                "queueOffset": str(self.offset), "maxMsgNums": str(self.max_messages),
                "sysFlag": str(self.sys_flag), "commitOffset": str(self.commit_offset),
                "suspendTimeoutMillis": str(self.suspend_timeout_ms), "subscription": self.expression,
                "subVersion": "0",
                "expressionType": "SQL92" if self.expression_type == rmq_pb2.SQL92 else "TAG"}


Completion = Callable[[RemotingCommand | None, RmqUnavailable | None], None]


@dataclass(frozen=True)
class RemotingTarget:
    """A broker member's remoting port and the server id its requests are signed for."""

    address: str
    server_id: str
    label: str          # "<broker name> at <address>", for errors


@dataclass
class _Pending:
    deadline: float
    complete: Completion


class _Waiter:
    """What a blocking call waits on: a lock taken now and released by the call's one
    completion (cheaper to make and to wake than an Event, on both the caller's and the
    reader's side)."""

    __slots__ = ("_answered", "response", "failure")

    def __init__(self) -> None:
        self._answered = threading.Lock()
        self._answered.acquire()
        self.response: RemotingCommand | None = None
        self.failure: RmqUnavailable | None = None

    def __call__(self, response: RemotingCommand | None, failure: RmqUnavailable | None) -> None:
        self.response, self.failure = response, failure
        self._answered.release()

    def wait(self) -> None:
        self._answered.acquire()


class RemotingCall:
    """A pull in flight: `cancel()` ends it (its callback gets RmqUnavailable "... cancelled")."""

    def __init__(self, connection: RemotingConnection) -> None:
        self._connection = connection
        self.opaque = 0    # of the request now in flight (a request signed again gets a new one)

    def cancel(self) -> bool:
        return self._connection.cancel(self.opaque)


class RemotingConnection:
    """One TCP (or TLS) connection to a broker's remoting port and its reader thread."""

    def __init__(self, address: str, tls: TlsSettings | None, connect_timeout: float) -> None:
        host, _, port = address.rpartition(":")
        host = host.strip("[]")
        sock = socket.create_connection((host, int(port)), timeout=connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._wire: _PlainWire | _TlsWire = _PlainWire(sock) if tls is None else _TlsWire(sock, tls, host)
        sock.settimeout(DEADLINE_CHECK_S)
        self.address = address
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._opaques = itertools.count(1)
        self.closed = False
        self._reader = threading.Thread(target=self._read_forever, name=f"rmq-remoting-{address}",
                                        daemon=True)
        self._reader.start()

    def close(self) -> None:
        self.closed = True
        self._wire.close()

    def call(self, command: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send a request and wait for its answer (RmqUnavailable when none comes in time)."""
        waiter = _Waiter()
        self.start(command, timeout, waiter)
        waiter.wait()
        if waiter.failure is not None:
            raise waiter.failure
        assert waiter.response is not None
        return waiter.response

    def start(self, command: RemotingCommand, timeout: float, complete: Completion) -> int:
        """Send a request; `complete` runs once with its answer or the failure. The opaque."""
        opaque = command.opaque = next(self._opaques)
        with self._lock:
            if self.closed:
                raise PortUnreachable(f"connection to {self.address} is closed")
            if len(self._pending) >= MAX_IN_FLIGHT:
                raise ConnectionBusy(f"{MAX_IN_FLIGHT} calls in flight on {self.address}")
            self._pending[opaque] = _Pending(time.monotonic() + timeout, complete)
        try:
            self._write(command)
        except OSError as error:
            self._finish(opaque, None, RmqUnavailable(f"cannot write to {self.address}: {error}"))
        return opaque

    def cancel(self, opaque: int) -> bool:
        pending = self._take(opaque)
        if pending is None:
            return False
        cancel = RemotingCommand(RequestCode.CANCEL_REQUEST, flag=RPC_ONEWAY,
                                 ext_fields={CANCELLED_OPAQUE: str(opaque)}, language=LanguageCode.PYTHON)
        cancel.opaque = next(self._opaques)
        try:
            self._write(cancel)
        except OSError:
            pass   # the connection is gone: the broker dropped the request with it
        pending.complete(None, RequestCancelled("request cancelled"))
        return True

    def _write(self, command: RemotingCommand) -> None:
        self._wire.send(command.encode())

    def _take(self, opaque: int) -> _Pending | None:
        with self._lock:
            return self._pending.pop(opaque, None)

    def _finish(self, opaque: int, response: RemotingCommand | None, failure: RmqUnavailable | None) -> None:
        pending = self._take(opaque)
        if pending is not None:
            _complete(pending, response, failure)

    def _read_forever(self) -> None:
        buffer = bytearray()
        reason = "closed by the broker"
        checked = time.monotonic()
        try:
            while True:
                try:
                    chunk = self._wire.recv()
                except TimeoutError:
                    chunk = None
                if chunk == b"":
                    break
                if chunk:
                    buffer += chunk
                    self._dispatch(buffer)
                now = time.monotonic()
                if now - checked >= DEADLINE_CHECK_S:   # also while answers keep coming
                    self._expire(now)
                    checked = now
        except (OSError, FrameError) as error:
            reason = str(error)
        finally:
            self._fail_all(reason)

    def _dispatch(self, buffer: bytearray) -> None:
        """Complete the calls whose answers `buffer` holds whole; leave the rest in it."""
        position = 0
        while len(buffer) - position >= LENGTH.size:
            length = LENGTH.unpack_from(buffer, position)[0]
            if not 4 <= length <= MAX_FRAME_BYTES:
                raise FrameError(f"frame length {length} from {self.address} is outside "
                                 f"4..{MAX_FRAME_BYTES}")
            end = position + LENGTH.size + length
            if end > len(buffer):
                break
            command = decode(bytes(buffer[position + LENGTH.size : end]))
            position = end
            if command.is_response:
                self._finish(command.opaque, command, None)
            elif not command.is_oneway:   # the broker's own questions are for 4.x consumers
                self._write(command.response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "not a 4.x consumer"))
        del buffer[:position]

    def _expire(self, now: float) -> None:
        with self._lock:
            late = [opaque for opaque, pending in self._pending.items() if pending.deadline <= now]
        for opaque in late:
            self._finish(opaque, None, RmqUnavailable(f"no answer from {self.address} in time"))

    def _fail_all(self, reason: str) -> None:
        with self._lock:
            self.closed = True
            pending, self._pending = self._pending, {}
        for call in pending.values():
            _complete(call, None, RmqUnavailable(f"connection to {self.address} lost: {reason}"))


def _complete(pending: _Pending, response: RemotingCommand | None, failure: RmqUnavailable | None) -> None:
    """Run a call's completion on the reader thread; a callback that raises is logged (as grpc
    logs a failing done-callback), never the end of the reader."""
    try:
        pending.complete(response, failure)
    except Exception:
        log.exception("a remoting call's callback failed")


class _PlainWire:
    """A TCP connection: writes from any thread (one at a time), reads from the reader thread."""

    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock
        self._write_lock = threading.Lock()
        # read into one buffer: a fresh 256 KiB bytes per recv is an mmap and munmap each time
        self._read_buffer = memoryview(bytearray(READ_BYTES))

    def send(self, data: bytes) -> None:
        with self._write_lock:
            self.socket.sendall(data)

    def recv(self) -> bytes:
        """What arrived (b"" at the end; TimeoutError when nothing came within the timeout)."""
        count = self.socket.recv_into(self._read_buffer)
        return bytes(self._read_buffer[:count])

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.socket.shutdown(socket.SHUT_RDWR)
        self.socket.close()


class _TlsWire(_PlainWire):
    """TLS over a TCP connection through memory BIOs (as asyncio's SSL protocol does): an
    SSLSocket must not be read and written from two threads at once, so the TLS state is only
    touched under one lock, for in-memory work, and the socket carries the encrypted bytes."""

    def __init__(self, sock: socket.socket, tls: TlsSettings, host: str) -> None:
        super().__init__(sock)
        self._incoming, self._outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = client_ssl_context(tls).wrap_bio(self._incoming, self._outgoing, server_hostname=host)
        self._lock = threading.Lock()
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                self._flush()
                data = self.socket.recv(READ_BYTES)
                if not data:
                    raise ConnectionError("the broker closed the connection in the TLS handshake") from None
                self._incoming.write(data)
        self._flush()

    def send(self, data: bytes) -> None:
        with self._lock:    # records leave in the order they were made
            self._tls.write(data)
            self._flush()

    def recv(self) -> bytes:
        while True:
            data = self.socket.recv(READ_BYTES)
            with self._lock:
                if data:
                    self._incoming.write(data)
                else:
                    self._incoming.write_eof()
                plain = bytearray()
                try:
                    while chunk := self._tls.read(READ_BYTES):
                        plain += chunk
                except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                    pass
                self._flush()    # what reading produced (a key update's answer)
            if plain or not data:
                return bytes(plain)

    def _flush(self) -> None:
        pending = self._outgoing.read()
        if pending:
            self.socket.sendall(pending)


def client_ssl_context(tls: TlsSettings) -> ssl.SSLContext:
    """TLS as the client's gRPC channels use it: the CA file (else the system roots) and the
    client certificate for mutual TLS."""
    context = ssl.create_default_context(cafile=str(tls.ca_file) if tls.ca_file else None)
    if tls.cert_file is not None and tls.key_file is not None:
        context.load_cert_chain(tls.cert_file, tls.key_file)
    return context


class RemotingClient:
    """The SDK's remoting connections, one per broker address, opened on first use."""

    def __init__(self, credentials: Credentials | None, tls: TlsSettings | None, timeout: float) -> None:
        self._credentials = credentials
        self._tls = tls
        self._timeout = timeout
        self._lock = threading.Lock()
        self._connections: dict[str, RemotingConnection] = {}
        self._server_ids: dict[str, str] = {}   # remoting address -> the id its broker signs for, learned

    def close(self) -> None:
        with self._lock:
            connections, self._connections = self._connections, {}
        for connection in connections.values():
            connection.close()

    def send(self, target: RemotingTarget, topic: str, message: SendableMessage,
             timeout: float) -> rmq_pb2.SendMessageResponse:
        """One message (SEND_MESSAGE), answered as SendMessage answers it."""
        command = send_command(topic, message)
        connection = self._connection(target)
        answer = connection.call(self._signed(command, target), timeout)
        if self._learned(target, answer):
            answer = connection.call(self._signed(command, target), timeout)
        return send_answer(answer)

    def send_async(self, target: RemotingTarget, topic: str, message: SendableMessage, timeout: float,
                   done: Callable[[rmq_pb2.SendMessageResponse | None, RmqUnavailable | None], None]) -> bool:
        """`send` without blocking (NettyRemotingClient.invokeAsync): `done(answer, None)` or
        `done(None, failure)` runs once on the reader thread. True: the request is on its way."""
        command = send_command(topic, message)
        connection = self._connection(target)

        def complete(answer: RemotingCommand | None, failure: RmqUnavailable | None) -> None:
            if answer is not None and self._learned(target, answer):   # once: then finish
                connection.start(self._signed(command, target), timeout, finish)
                return
            finish(answer, failure)

        def finish(answer: RemotingCommand | None, failure: RmqUnavailable | None) -> None:
            if answer is None:
                done(None, failure)
            else:
                done(send_answer(answer), None)

        connection.start(self._signed(command, target), timeout, complete)
        return True

    def pull_async(self, target: RemotingTarget, pull: PullSpec, timeout: float,
                   done: Callable[[PullResult | rmq_pb2.Status | None, RmqError | None], None]
                   ) -> RemotingCall:
        """One PULL_MESSAGE; `done(result, None)` with the answer as a PullResult (or the
        refusal's Status), or `done(None, failure)`, on the reader thread."""
        fields = pull.header()
        command = RemotingCommand(RequestCode.PULL_MESSAGE, ext_fields=fields, serialize_type=HEADER_ENCODING)
        connection = self._connection(target)
        call = RemotingCall(connection)

        def complete(answer: RemotingCommand | None, failure: RmqUnavailable | None) -> None:
            if answer is not None and self._learned(target, answer):   # once: then finish
                call.opaque = connection.start(self._signed(command, target), timeout, finish)
                return
            finish(answer, failure)

        def finish(answer: RemotingCommand | None, failure: RmqUnavailable | None) -> None:
            if answer is None:
                done(None, failure)
                return
            try:
                result = pull_answer(answer)
            except RmqError as error:
                done(None, error)
                return
            done(result, None)

        call.opaque = connection.start(self._signed(command, target), timeout, complete)
        return call

    def _signed(self, command: RemotingCommand, target: RemotingTarget) -> RemotingCommand:
        """`command` signed (afresh) for the server id learned for the target, else the route's."""
        command.language = LanguageCode.PYTHON
        if self._credentials is None:
            return command
        server_id = self._server_ids.get(target.address, target.server_id)
        return request_signing.sign(command, self._credentials.access_key, self._credentials.secret_key,
                                    server_id)

    def _learned(self, target: RemotingTarget, answer: RemotingCommand) -> bool:
        """True when `answer` refused a request signed for another server and named this one
        (a member whose id changed): requests are signed for it from now on."""
        server = answer.ext_fields.get(request_signing.SERVER_FIELD)
        if answer.code != ResponseCode.NO_PERMISSION or server is None:
            return False
        with self._lock:
            if server == self._server_ids.get(target.address, target.server_id):
                return False
            self._server_ids[target.address] = server
        return True

    def _connection(self, target: RemotingTarget) -> RemotingConnection:
        """The open connection to `target`, opened now when there is none (RmqUnavailable when
        it cannot be)."""
        with self._lock:
            connection = self._connections.get(target.address)
            if connection is not None and not connection.closed:
                return connection
            try:
                connect_timeout = min(self._timeout, CONNECT_TIMEOUT_S)
                connection = RemotingConnection(target.address, self._tls, connect_timeout)
            except (OSError, ssl.SSLError) as error:
                raise PortUnreachable(f"cannot connect to the remoting port {target.address}: {error}",
                                     broker=target.label) from None
            self._connections[target.address] = connection
            return connection


def send_command(topic: str, message: SendableMessage) -> RemotingCommand:
    """The SEND_MESSAGE request of one message (SendMessageRequestHeader)."""
    properties = dict(message.properties)
    for name, value in ((mf.PROPERTY_TAGS, message.tags), (mf.PROPERTY_KEYS, message.keys),
                        (mf.PROPERTY_DELAY_TIME_LEVEL, str(message.delay_level or ""))):
        if value:
            properties[name] = value
    queue_id = -1 if message.queue_id is None else message.queue_id
    fields = {"producerGroup": "", "topic": topic, "queueId": str(queue_id), "sysFlag": "0",
              "flag": str(message.flag), "bornTimestamp": str(int(time.time() * 1000)),
              "properties": mf.encode_properties(properties)}
    return RemotingCommand(RequestCode.SEND_MESSAGE, ext_fields=fields, body=message.body,
                           serialize_type=HEADER_ENCODING)


def send_answer(answer: RemotingCommand) -> rmq_pb2.SendMessageResponse:
    """A SEND_MESSAGE answer as SendMessage answers it."""
    status = answer_status(answer)
    if answer.code not in (ResponseCode.SUCCESS, ResponseCode.FLUSH_SLAVE_TIMEOUT,
                           ResponseCode.SLAVE_NOT_AVAILABLE):
        return rmq_pb2.SendMessageResponse(status=status)
    fields = answer.ext_fields
    return rmq_pb2.SendMessageResponse(status=status, msg_ids=[fields["msgId"]],
                                       queue_ids=[int(fields["queueId"])],
                                       queue_offsets=[int(fields["queueOffset"])],
                                       recall_handles=[fields.get("recallHandle", "")])


def answer_status(answer: RemotingCommand) -> rmq_pb2.Status:
    """An answer's code as the Status the gRPC port gives: the exact rmq.v1 code when the broker
    names it (RMQ_CODE_FIELD), else the response code read backwards."""
    named = answer.ext_fields.get(RMQ_CODE_FIELD, "")
    code = int(named) if named.isdecimal() and int(named) in rmq_pb2.Code.values() \
        else STATUS_CODES.get(answer.code, rmq_pb2.SYSTEM_ERROR)
    return rmq_pb2.Status(code=cast(rmq_pb2.Code, code), message=answer.remark or "")


def pull_answer(answer: RemotingCommand) -> PullResult | rmq_pb2.Status:
    """A PULL_MESSAGE answer as the PullResult the gRPC port's answer makes (built straight from
    the frame: no PullMessageResponse in between), or, for any other code, the refusal's Status."""
    statuses = PULL_STATUSES.get(answer.code)
    if statuses is None:
        return answer_status(answer)
    fields = answer.ext_fields
    return PullResult(statuses[0], statuses[1], int(fields.get("nextBeginOffset", 0)),
                      int(fields.get("minOffset", 0)), int(fields.get("maxOffset", 0)), packed(answer.body),
                      int(fields.get("suggestWhichBrokerId", 0)))


def packed(records: bytes) -> rmq_pb2.PackedMessages:
    """CommitLog records back to back as PackedMessages (each record starts with its size)."""
    sizes: list[int] = []
    append, size_at = sizes.append, RECORD_SIZE.unpack_from
    position, end = 0, len(records)
    while position < end:
        size = size_at(records, position)[0]
        if size <= 0:
            raise CorruptMessagesError(f"corrupt pull answer: record size {size} at {position}")
        append(size)
        position += size
    return rmq_pb2.PackedMessages(count=len(sizes), sizes=struct.pack(f"<{len(sizes)}i", *sizes),
                                  records=records)
