"""A blocking RocketMQ 4.x remoting client for tests: frames built with rmq's own codec, so tests
can send exact (and hostile) bytes and read the broker's answers."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator

from rmq.broker_server.remoting.remoting_server import RemotingServer
from rmq.remoting.remoting_command import LENGTH, RemotingCommand, decode

TIMEOUT_S = 30.0


class RemotingTestClient:
    def __init__(self, address: str, source: str | None = None) -> None:
        """`source`: the local address to connect from (e.g. 127.0.0.2, another loopback client)."""
        host, _, port = address.rpartition(":")
        self.socket = socket.create_connection((host, int(port)), timeout=TIMEOUT_S,
                                               source_address=None if source is None else (source, 0))
        self._opaque = 0
        self._answers: dict[int, RemotingCommand] = {}  # responses read while waiting for another

    def close(self) -> None:
        self.socket.close()

    def __enter__(self) -> RemotingTestClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def send(self, command: RemotingCommand) -> int:
        self._opaque += 1
        command.opaque = self._opaque
        self.socket.sendall(command.encode())
        return command.opaque

    def call(self, command: RemotingCommand) -> RemotingCommand:
        """Send a request and wait for its response."""
        return self.response(self.send(command))

    def response(self, opaque: int) -> RemotingCommand:
        """The response to the request sent as `opaque` (server requests read meanwhile are skipped)."""
        while opaque not in self._answers:
            answer = self.read()
            if answer.is_response:
                self._answers[answer.opaque] = answer
        return self._answers.pop(opaque)

    def read(self) -> RemotingCommand:
        length = LENGTH.unpack(self._exactly(LENGTH.size))[0]
        return decode(self._exactly(length))

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.socket.recv(size - len(data))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            data += chunk
        return data

    def closed_by_peer(self, timeout_s: float = TIMEOUT_S) -> bool:
        """Whether the broker closes the connection (reads until EOF; False if it stays open)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.socket.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not self.socket.recv(65536):
                    return True
            except TimeoutError:
                return False
            except ConnectionResetError:
                return True
        return False


@contextlib.contextmanager
def serving(server: RemotingServer) -> Iterator[str]:
    """`server` started on an event loop of its own thread for the block, and its address."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(server.start(), loop).result(10)
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
