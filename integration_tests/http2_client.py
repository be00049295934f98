"""A minimal HTTP/2 client over a plain socket, for attacks a well-behaved gRPC client cannot
make: a gRPC call that streams a huge message from a small buffer (so the test process stays
small), headers of any size, and connections that finish the HTTP/2 preface and then stay
silent. Frames after RFC 7540 §4 and §6; header blocks as HPACK literals without indexing
(RFC 7541 §6.2.2), no Huffman coding. Plaintext only (`--tls-*` servers are not its target).
"""

from __future__ import annotations

import select
import socket
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE = 0, 1, 3, 4, 6, 7, 8
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 0x4, 0x5
DEFAULT_WINDOW = 65_535
STREAM_ID = 1
CHUNK = bytes(16_384)   # the one buffer every DATA frame is cut from


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes((kind, flags)) + struct.pack(">I", stream) + payload


def _hpack_int(value: int, prefix_bits: int = 7) -> bytes:
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes((value,))
    out, value = bytearray((limit,)), value - limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    out.append(value)
    return bytes(out)


def header_block(headers: Iterable[tuple[str, str]]) -> bytes:
    block = bytearray()
    for name, value in headers:
        block += b"\x00" + _hpack_int(len(name)) + name.encode() + _hpack_int(len(value.encode()))
        block += value.encode()
    return bytes(block)


def grpc_headers(address: str, method: str,
                 metadata: Iterable[tuple[str, str]] = ()) -> list[tuple[str, str]]:
    return [(":method", "POST"), (":scheme", "http"), (":path", method), (":authority", address),
            ("content-type", "application/grpc"), ("te", "trailers"), *metadata]


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def send_message_prefix(topic: str, body_bytes: int) -> tuple[bytes, int]:
    """The start of a gRPC-framed SendMessageRequest{topic, messages: [{body: zeros}]}, and the
    number of zero bytes (the body) that complete it."""
    message = b"\x0a" + _varint(body_bytes)                       # Message.body = 1
    request = b"\x0a" + _varint(len(topic)) + topic.encode()      # SendMessageRequest.topic = 1
    request += b"\x12" + _varint(len(message) + body_bytes) + message   # .messages = 2
    length = len(request) + body_bytes
    return b"\x00" + struct.pack(">I", length) + request, body_bytes


@dataclass
class CallOutcome:
    """How the server ended one raw call: the bytes of the request it let the client send,
    the grpc-status it answered (None: none before the connection ended) and whether it
    reset the stream."""

    bytes_sent: int
    grpc_status: int | None
    grpc_message: str
    reset: bool


def connect(address: str, timeout: float = 5.0, source: str | None = None) -> socket.socket:
    """A TCP connection (from loopback address `source`, e.g. 127.0.0.2, when given) that has
    sent the preface and an empty SETTINGS frame."""
    host, _, port = address.rpartition(":")
    sock = socket.create_connection((host, int(port)), timeout=timeout,
                                    source_address=(source, 0) if source else None)
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
    return sock


def _frames(buffer: bytearray) -> Iterable[tuple[int, int, int, bytes]]:
    while len(buffer) >= 9:
        length = int.from_bytes(buffer[:3], "big")
        if len(buffer) < 9 + length:
            return
        kind, flags = buffer[3], buffer[4]
        stream = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
        payload = bytes(buffer[9:9 + length])
        del buffer[:9 + length]
        yield kind, flags, stream, payload


def _literal_headers(block: bytes) -> dict[str, str]:
    """grpc-status and grpc-message from a trailers block when the server sent them as
    literals; indexed or Huffman-coded fields are skipped (the status then reads as None)."""
    found: dict[str, str] = {}
    for name in ("grpc-status", "grpc-message"):
        at = block.find(name.encode())
        if at >= 0:
            start = at + len(name)
            size = block[start] & 0x7F
            if not block[start] & 0x80:
                found[name] = block[start + 1:start + 1 + size].decode(errors="replace")
    return found


class RawCall:
    """One gRPC call on its own connection, its request streamed as the server's flow-control
    windows allow (the server only opens them for data it reads)."""

    def __init__(self, address: str, method: str, metadata: Iterable[tuple[str, str]], prefix: bytes,
                 zeros: int, source: str | None = None) -> None:
        self.sock = connect(address, source=source)
        self.sock.sendall(frame(HEADERS, END_HEADERS, STREAM_ID, header_block(grpc_headers(address, method,
                                                                                           metadata))))
        self._pending = [prefix]
        self._zeros = zeros
        self._connection_window = DEFAULT_WINDOW
        self._stream_window = DEFAULT_WINDOW
        self._max_frame = len(CHUNK)
        self.sent = 0

    def run(self, deadline_s: float) -> CallOutcome:
        buffer = bytearray()
        status: dict[str, str] = {}
        reset = False
        end = time.monotonic() + deadline_s
        try:
            while time.monotonic() < end and not status and not reset:
                self._send_what_the_windows_allow()
                readable, _, _ = select.select([self.sock], [], [], 0.05)
                if not readable:
                    continue
                data = self.sock.recv(65_536)
                if not data:
                    break
                buffer += data
                for kind, flags, stream, payload in _frames(buffer):
                    status, reset = self._on_frame(kind, flags, stream, payload, status, reset)
        except OSError:
            pass
        finally:
            self.sock.close()
        code = status.get("grpc-status")
        return CallOutcome(self.sent, int(code) if code is not None else None, status.get("grpc-message", ""),
                           reset)

    def _on_frame(self, kind: int, flags: int, stream: int, payload: bytes, status: dict[str, str],
                  reset: bool) -> tuple[dict[str, str], bool]:
        if kind == SETTINGS and not flags & ACK:
            for at in range(0, len(payload), 6):
                key, value = struct.unpack(">HI", payload[at:at + 6])
                if key == SETTINGS_INITIAL_WINDOW_SIZE:
                    self._stream_window += value - DEFAULT_WINDOW
                elif key == SETTINGS_MAX_FRAME_SIZE:
                    self._max_frame = min(value, len(CHUNK))
            self.sock.sendall(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            self.sock.sendall(frame(PING, ACK, 0, payload))
        elif kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if stream == 0:
                self._connection_window += increment
            else:
                self._stream_window += increment
        elif kind == HEADERS and stream == STREAM_ID and flags & END_STREAM:
            status = _literal_headers(payload) or {"grpc-status": "-1"}
        elif kind in (RST_STREAM, GOAWAY):
            reset = reset or kind == RST_STREAM
        return status, reset

    def _send_what_the_windows_allow(self) -> None:
        while True:
            window = min(self._connection_window, self._stream_window, self._max_frame)
            if window <= 0 or (not self._pending and not self._zeros):
                return
            if self._pending:
                chunk = self._pending[0][:window]
                self._pending[0] = self._pending[0][len(chunk):]
                if not self._pending[0]:
                    self._pending.pop()
            else:
                chunk = CHUNK[:min(window, self._zeros)]
                self._zeros -= len(chunk)
            last = not self._pending and not self._zeros
            self.sock.sendall(frame(DATA, END_STREAM if last else 0, STREAM_ID, chunk))
            self._connection_window -= len(chunk)
            self._stream_window -= len(chunk)
            self.sent += len(chunk)


def silent_connection(address: str, settings_timeout: float = 5.0) -> tuple[socket.socket, bool]:
    """A connection that sends the HTTP/2 preface, acknowledges the server's SETTINGS, then
    sends nothing more (the caller keeps it open); and whether the server sent its SETTINGS
    within `settings_timeout` (False: it has not served the connection yet)."""
    sock = connect(address)
    buffer = bytearray()
    end = time.monotonic() + settings_timeout
    while (left := end - time.monotonic()) > 0:
        readable, _, _ = select.select([sock], [], [], left)
        if not readable:
            break
        data = sock.recv(65_536)
        if not data:
            break
        buffer += data
        for kind, flags, _stream, _payload in _frames(buffer):
            if kind == SETTINGS and not flags & ACK:
                sock.sendall(frame(SETTINGS, ACK, 0))
                return sock, True
    return sock, False


def closed_by_server(sock: socket.socket, timeout: float) -> bool:
    """True when the server closes (or resets) the connection within `timeout` seconds; frames
    it sends meanwhile (GOAWAY, PING) are read and ignored."""
    end = time.monotonic() + timeout
    while (left := end - time.monotonic()) > 0:
        readable, _, _ = select.select([sock], [], [], left)
        if not readable:
            return False
        try:
            if not sock.recv(65_536):
                return True
        except OSError:
            return True
    return False
