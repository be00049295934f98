"""The Redis Streams reference: Debian's `redis-server` on a free loopback port with no
persistence, driven through redis-py (XADD pipelined, XRANGE COUNT, XREAD BLOCK)."""

from __future__ import annotations

import time

import redis

from bench.harness import call_latencies_ms, rate, wake_latency_ms
from bench.reference_process import ReferenceProcess, find_or_install

PIPELINE_DEPTH = 256
XRANGE_COUNT = 1024


class RedisUnavailable(Exception):
    """redis-server is not installed and could not be installed."""


def find_redis_server() -> str:
    return find_or_install("redis-server", "redis-server", RedisUnavailable)


class RedisServer(ReferenceProcess):
    """One redis-server process: loopback, free port, no RDB snapshots, no AOF."""

    def start(self) -> RedisServer:
        self.spawn([find_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--dir", str(self.work_dir)], "redis.log")
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
