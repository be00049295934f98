"""What an idle gap costs on this machine (issue 29 item 1, bench/NOTES.md "The idle floor"):
row 4 sends one message every 20 ms, and code that runs after such a gap is slow the first time
it touches anything, because the idle vCPU's caches were refilled by others meanwhile.

`python -m bench.idle_floor` prints, as p50 / p99 over `--samples` round trips (after warm-up):
- a fixed pure-Python workload run back to back, after `time.sleep(GAP_S)`, and after a busy
  spin of GAP_S (the same wall time without the vCPU going idle);
- one remoting frame's round trip to a bare `asyncio.Protocol` server in another process that
  echoes it from `data_received` (the floor of any Python server over loopback), and to a broker's
  remoting port for a request code it does not serve (answered by its dispatcher, no processor),
  each back to back and after the gap."""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.harness import percentile
from rmq.remoting.remoting_command import LENGTH, RemotingCommand
from testing import processes

GAP_S = 0.020     # row 4's pace
WARMUP = 20
UNSERVED_CODE = 99_999   # no processor serves it: the dispatcher answers REQUEST_CODE_NOT_SUPPORTED

ECHO_SERVER = r"""
import asyncio, sys

class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""

    def data_received(self, data):
        self.buffer += data
        while len(self.buffer) >= 4:
            length = int.from_bytes(self.buffer[:4], "big")
            if len(self.buffer) < 4 + length:
                return
            frame, self.buffer = self.buffer[:4 + length], self.buffer[4 + length:]
            self.transport.write(frame)

async def serve():
    server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", int(sys.argv[1]))
    print("ready", flush=True)
    await server.serve_forever()

asyncio.run(serve())
"""


def workload() -> str:
    """A few hundred dict stores, string builds and a JSON dump: interpreter, allocator, builtins."""
    table = {i: f"{i}x" for i in range(300)}
    return json.dumps(table)[:10]


def _pause(mode: str) -> None:
    if mode == "sleep":
        time.sleep(GAP_S)
    elif mode == "spin":
        until = time.perf_counter() + GAP_S
        while time.perf_counter() < until:
            pass


def _timed(step: Callable[[], object], mode: str, samples: int) -> list[float]:
    """ms per `step`, each after `mode`'s pause, the warm-up left out."""
    times = []
    for i in range(samples + WARMUP):
        _pause(mode)
        start = time.perf_counter_ns()
        step()
        if i >= WARMUP:
            times.append((time.perf_counter_ns() - start) / 1e6)
    return times


def _p50_p99(times: list[float]) -> str:
    return f"p50 {statistics.median(times):.3f} ms  p99 {percentile(times, 0.99):.3f} ms"


def _round_trip(port: int) -> Callable[[], object]:
    connection = socket.create_connection(("127.0.0.1", port))
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    frame = RemotingCommand(UNSERVED_CODE, opaque=1).encode()

    def exchange() -> bytes:
        connection.sendall(frame)
        (length,) = LENGTH.unpack(_read(connection, LENGTH.size))
        return _read(connection, length)
    return exchange


def _read(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the server closed the connection")
        data += chunk
    return data


@contextmanager
def _echo_server() -> Iterator[int]:
    port = processes.free_port()
    server = subprocess.Popen([sys.executable, "-c", ECHO_SERVER, str(port)], stdout=subprocess.PIPE)
    try:
        assert server.stdout is not None
        server.stdout.readline()
        yield port
    finally:
        server.kill()
        server.wait()


@contextmanager
def _broker_remoting_port() -> Iterator[int]:
    port = processes.free_port()
    with tempfile.TemporaryDirectory() as directory:
        broker = processes.broker(Path(directory), flush="async",
                                  extra=["--remoting-listen", f"127.0.0.1:{port}"]).start()
        try:
            yield port
        finally:
            broker.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=300)
    samples = parser.parse_args().samples
    for mode in ("none", "sleep", "spin"):
        print(f"Python workload, {mode:5s} before each: {_p50_p99(_timed(workload, mode, samples))}")
    with _echo_server() as echo_port, _broker_remoting_port() as broker_port:
        servers = (("bare asyncio.Protocol echo", echo_port), ("broker, unserved code", broker_port))
        for label, port in servers:
            exchange = _round_trip(port)
            for mode in ("none", "sleep"):
                times = _timed(exchange, mode, samples)
                print(f"round trip to {label}, {mode:5s} before each: {_p50_p99(times)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
