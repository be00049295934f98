"""The NATS JetStream reference: Debian's `nats-server -js` on a free loopback port with file
storage in the run's scratch directory, driven through nats-py. A persistent broker people pick
for this job, beside Redis (which keeps nothing on disk here): publish with acks, a durable pull
consumer acking what it fetched, and the wake of a parked fetch by one publish.

nats-py is asyncio-only; each measurement runs one coroutine on a fresh event loop in the calling
thread, and the wake uses two connections (reader, writer) on that loop."""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Awaitable
from typing import TypeVar

import nats
from nats.js.api import AckPolicy, ConsumerConfig, StorageType, StreamConfig

from bench.reference_process import ReferenceProcess, find_or_install

T = TypeVar("T")
PUBLISH_WINDOW = 256     # publishes in flight before their acks are awaited (like a 256-message batch)
FETCH_BATCH = 256
STREAM = "bench"


class NatsUnavailable(Exception):
    """nats-server is not installed and could not be installed, or did not start."""


def find_nats_server() -> str:
    return find_or_install("nats-server", "nats-server", NatsUnavailable)


class NatsServer(ReferenceProcess):
    """One nats-server process with JetStream on file storage: loopback, free port."""

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> NatsServer:
        self.spawn([find_nats_server(), "-a", "127.0.0.1", "-p", str(self.port), "-js",
                    "-sd", str(self.work_dir / "jetstream")], "nats.log")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                run(self._ping())
                return self
            except (OSError, nats.errors.Error):
                time.sleep(0.05)
        self.stop()
        raise NatsUnavailable(f"nats-server on port {self.port} not ready after 10 s")

    async def _ping(self) -> None:
        connection = await nats.connect(self.url, connect_timeout=1, allow_reconnect=False,
                                        max_reconnect_attempts=0, error_cb=_quiet)
        await connection.close()

    def version(self) -> str:
        found = subprocess.run([find_nats_server(), "--version"], capture_output=True, text=True, check=False)
        return found.stdout.strip().removeprefix("nats-server: ")


async def _quiet(error: Exception) -> None:
    """nats-py logs every failed connect with a traceback; start() retries until ready."""


def run(coroutine: Awaitable[T]) -> T:
    return asyncio.run(_as_coroutine(coroutine))


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def fresh_stream(url: str, subject: str) -> tuple[nats.NATS, nats.js.JetStreamContext]:
    """A connection and its JetStream context, with STREAM made anew (file storage) for `subject`."""
    connection = await nats.connect(url)
    jetstream = connection.jetstream()
    try:
        await jetstream.delete_stream(STREAM)
    except nats.js.errors.NotFoundError:
        pass
    await jetstream.add_stream(StreamConfig(name=STREAM, subjects=[subject], storage=StorageType.FILE))
    return connection, jetstream


async def _publish(jetstream: nats.js.JetStreamContext, subject: str, body: bytes, count: int) -> None:
    """`count` publishes, each acknowledged by the stream; PUBLISH_WINDOW in flight at a time."""
    for start in range(0, count, PUBLISH_WINDOW):
        await asyncio.gather(*(jetstream.publish(subject, body)
                               for _ in range(min(PUBLISH_WINDOW, count - start))))


def publish_rate(server: NatsServer, body: bytes, count: int) -> float:
    """Messages/s of JetStream publish with acks into a fresh file-backed stream."""
    async def measure() -> float:
        connection, jetstream = await fresh_stream(server.url, "bench.publish")
        try:
            start = time.perf_counter()
            await _publish(jetstream, "bench.publish", body, count)
            return count / (time.perf_counter() - start)
        finally:
            await connection.close()
    return run(measure())


def durable_pull_rate(server: NatsServer, body: bytes, count: int) -> float:
    """Messages/s of a durable pull consumer fetching FETCH_BATCH at a time and acking each batch
    (AckPolicy.ALL: the last message acks the batch, as a committed offset does) over a stream
    pre-filled with `count` messages."""
    async def measure() -> float:
        connection, jetstream = await fresh_stream(server.url, "bench.pull")
        try:
            await _publish(jetstream, "bench.pull", body, count)
            subscription = await jetstream.pull_subscribe(
                "bench.pull", durable="bench", config=ConsumerConfig(ack_policy=AckPolicy.ALL))
            received = 0
            start = time.perf_counter()
            while received < count:
                batch = await subscription.fetch(min(FETCH_BATCH, count - received), timeout=10)
                await batch[-1].ack_sync()
                received += len(batch)
            return count / (time.perf_counter() - start)
        finally:
            await connection.close()
    return run(measure())


def wake_latencies(server: NatsServer, samples: int, body: bytes, settle_s: float) -> list[float]:
    """Wake latency in ms of a parked durable fetch(1): a reader waits on the stream's tail, a
    writer publishes one message (with its ack) after `settle_s`; measured from just before the
    publish to the fetch's return."""
    async def measure() -> list[float]:
        reader, jetstream = await fresh_stream(server.url, "bench.wake")
        writer = await nats.connect(server.url)
        try:
            subscription = await jetstream.pull_subscribe(
                "bench.wake", durable="wake", config=ConsumerConfig(ack_policy=AckPolicy.ALL))
            publisher = writer.jetstream()
            latencies = []
            for _ in range(samples):
                latencies.append(await _one_wake(subscription, publisher, body, settle_s))
            return latencies
        finally:
            await writer.close()
            await reader.close()
    return run(measure())


async def _one_wake(subscription: nats.js.JetStreamContext.PullSubscription,
                    publisher: nats.js.JetStreamContext, body: bytes, settle_s: float) -> float:
    fetch = asyncio.ensure_future(subscription.fetch(1, timeout=5))
    await asyncio.sleep(settle_s)            # the fetch is parked on the server, as the rmq pull is held
    sent = time.perf_counter()
    published = asyncio.ensure_future(publisher.publish("bench.wake", body))
    messages = await fetch
    returned = time.perf_counter()
    await published
    await messages[-1].ack()
    return (returned - sent) * 1000.0


