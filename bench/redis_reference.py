"""The Redis Streams reference: Debian's `redis-server` on a free loopback port with no
persistence, driven through redis-py (XADD pipelined, XRANGE COUNT, XREAD BLOCK)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis

from bench.harness import call_latencies_ms, rate, wake_latency_ms
from rmq.cli.processes import free_port

PIPELINE_DEPTH = 256
XRANGE_COUNT = 1024


class RedisUnavailable(Exception):
    """redis-server is not installed and could not be installed."""


def find_redis_server() -> str:
    """Path of `redis-server`; tries one `apt-get install` when it is missing."""
    path = shutil.which("redis-server")
    if path:
        return path
    try:
        for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "redis-server"]):
            subprocess.run(command, check=True, capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as error:
        raise RedisUnavailable(f"redis-server not on PATH and apt-get install failed ({error})") from error
    path = shutil.which("redis-server")
    if not path:
        raise RedisUnavailable("redis-server not on PATH after apt-get install")
    return path


class RedisServer:
    """One redis-server process: loopback, free port, no RDB snapshots, no AOF."""

    def __init__(self, work_dir: Path) -> None:
        self.port = free_port()
        self.work_dir = work_dir
        self.process: subprocess.Popen | None = None

    def start(self) -> RedisServer:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.work_dir / "redis.log", "ab")
        self.process = subprocess.Popen(
            [find_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self.work_dir)],
            stdout=log, stderr=subprocess.STDOUT,
        )
        log.close()
        self._wait_ready()
        return self

    def _wait_ready(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.client().ping():
                    return
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RedisUnavailable(f"redis-server on port {self.port} not ready after {timeout}s")

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port)

    def version(self) -> str:
        return str(self.client().info("server")["redis_version"])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def xadd(client: redis.Redis, key: str, body: bytes, count: int, depth: int = PIPELINE_DEPTH) -> None:
    """XADD `count` entries, `depth` per pipeline round trip."""
    for start in range(0, count, depth):
        pipe = client.pipeline(transaction=False)
        for _ in range(min(depth, count - start)):
            pipe.xadd(key, {"body": body})
        pipe.execute()


def xadd_rate(client: redis.Redis, body: bytes, count: int, depth: int = PIPELINE_DEPTH) -> float:
    """Entries/s of XADD pipelined `depth` deep into a fresh stream."""
    key = "bench-xadd"
    client.delete(key)
    try:
        return rate(count, lambda: xadd(client, key, body, count, depth))
    finally:
        client.delete(key)


def xrange_all(client: redis.Redis, key: str, count: int = XRANGE_COUNT) -> int:
    """Read the whole stream with XRANGE COUNT `count`; returns the entries read."""
    total = 0
    start = "-"
    while True:
        entries = client.xrange(key, min=start, max="+", count=count)
        if not entries:
            return total
        total += len(entries)
        start = b"(" + entries[-1][0]


def xrange_rate(client: redis.Redis, key: str, count: int) -> float:
    """Entries/s of XRANGE COUNT 1024 over a pre-filled stream of `count` entries."""
    return rate(count, lambda: xrange_all(client, key))


def ping_latencies(server: RedisServer, samples: int, idle_s: float = 0.0) -> list[float]:
    """PING round trips in ms (after 20 to warm up), each after `idle_s`: Redis's own floor per call."""
    return call_latencies_ms(server.client().ping, samples, idle_s=idle_s)


def xread_block_latencies(server: RedisServer, samples: int, body: bytes, settle_s: float) -> list[float]:
    """Wake latency in ms of XREAD BLOCK: a reader blocks on the stream's tail, a writer
    XADDs one entry; measured from just before the XADD to the reader's return."""
    key = "bench-xread"
    writer, reader = server.client(), server.client()
    writer.delete(key)
    last_id: list[bytes | str] = ["0-0"]
    latencies: list[float] = []
    try:
        for _ in range(samples):
            latencies.append(wake_latency_ms(
                block=lambda: reader.xread({key: last_id[0]}, count=1, block=5000),
                wake=lambda: last_id.__setitem__(0, writer.xadd(key, {"body": body})),
                settle_s=settle_s,
            ))
    finally:
        writer.delete(key)
    return latencies
