"""Section 16: one message per request (issue 41). Every
official RocketMQ client sends one message per request, and so do most services: this section
measures that path, from the same numbers of senders as its references, in one run.

A sender is a thread (a coroutine for NATS); N senders are 1 process × 1 thread, or 4 processes
× N/4 threads (each process one Producer, one redis-py client, one NATS connection, as a service
holds one). Every rmq row reports the broker's CPU per request (its /proc utime + stime over the
timed sends, divided by the messages) beside the rate; the Redis and NATS references report
their servers' CPU the same way."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import redis

from bench import machine
from bench.environment import Environment
from bench.harness import Row, Stats, Target, not_measured, one_line
from bench.nats_reference import NatsServer, fresh_stream
from bench.parallel import parallel_measure
from bench.redis_reference import RedisServer
from bench.rocketmq_v2_bench import official_send
from rmq import event_loop
from rmq.connector import Message, Producer
from rmq.connector.client import RmqClient
from testing.cpp_client import client_env, cpp_client_problem

BODY_SIZE = 100
QUEUES = 8
TOPIC = "bench-one"
REDIS_KEY = "bench-one"
NATS_SUBJECT = "bench.one"
COMPARED_SENDERS = (1, 32)          # the rows against Redis and NATS
SCALING_SENDERS = (1, 8, 32, 128)   # the scaling curve
PROCESSES = 4                       # senders > 1 run as 4 processes × senders/4 threads
CPP_SCRIPT = Path(__file__).with_name("cpp_send_sync.py")
CPP_TIMEOUT_S = 600
TARGET_REMOTING_CPU_US = 40.0       # issue 41: broker CPU per single send, remoting port
TARGET_GRPC_CPU_US = 80.0           # ... either gRPC port


@dataclass(frozen=True)
class Senders:
    """`count` senders as processes × threads each."""

    count: int

    @property
    def processes(self) -> int:
        return 1 if self.count == 1 else PROCESSES

    @property
    def threads(self) -> int:
        return self.count // self.processes

    def label(self) -> str:
        if self.count == 1:
            return "1 sender"
        return f"{self.count} senders ({self.processes} processes × {self.threads} threads)"


@dataclass(frozen=True)
class Measured:
    """One kind of request over the repeats: rate (msg/s) and server CPU per request (µs)."""

    rate: Stats
    cpu_us: Stats


def one_message_rows(env: Environment) -> list[Row]:
    """1 and 32 senders of rmq `Producer.send(Message)` (blocking, one message per call) and
    of `Producer.send_async` (each sender keeps up to 512 sends in flight), each beside redis-py
    XADD without a pipeline and NATS JetStream `publish` awaited one at a time per sender, from
    the same senders in the same run; one thread of the official RocketMQ 4.x C++ client's
    `send_sync` (PyPI rocketmq 0.4.4, over the remoting port) and of the official RocketMQ 5
    Python client's `send` (gRPC); then `Producer.send` from 1, 8, 32 and 128 senders (one run
    each). 100-byte
    bodies, a topic of 8 queues, the broker at its defaults (ASYNC flush, remoting port on);
    the broker's CPU per request with every rmq row (targets ≤ 40 µs on the remoting port,
    ≤ 80 µs on gRPC)."""
    body = b"m" * BODY_SIZE    # text: the C++ client's binding takes a body as a C string
    total = max(env.scale.produce_messages // 5, 1000)      # messages per run of many senders
    single = max(env.scale.produce_messages // 20, 300)     # ... of one sender
    repeats = env.scale.repeats
    rows: list[Row] = []
    with env.broker() as broker, env.redis() as redis_server, env.nats() as nats_server:
        with RmqClient(broker.address) as client:
            client.create_topic(TOPIC, queues=QUEUES)
            remoting = client.list_broker_groups()["broker-a"][0].remoting_address
        broker_pid = _pid(broker.process)
        for mode in ("send", "send_async"):
            for n in COMPARED_SENDERS:
                senders = Senders(n)
                count = single if n == 1 else total
                rows += _compared_rows(mode, senders, count, repeats, body, broker.address, broker_pid,
                                       redis_server, nats_server, env)
        rows.append(_cpp_row(remoting, broker_pid, single, repeats, body))
        rows += _rocketmq5_rows(broker.address, broker_pid, single, repeats, body)
        for n in SCALING_SENDERS:   # one run per point: a curve, not a gate
            measured = _measure(lambda n=n: _rmq_run("send", Senders(n), total if n > 1 else single, body,
                                                     broker.address, broker_pid), 1)
            rows.append(Row(f"scaling: Producer.send, {Senders(n).label()}", "msg/s", measured.rate,
                            note=_cpu_note("broker", measured.cpu_us)))
    return rows


def _compared_rows(mode: str, senders: Senders, count: int, repeats: int, body: bytes, address: str,
                   broker_pid: int, redis_server: RedisServer | None, nats_server: NatsServer | None,
                   env: Environment) -> list[Row]:
    """rmq `mode` from `senders`, Redis and NATS from the same senders, alternating per repeat."""
    rmq_runs: list[tuple[float, float]] = []
    redis_runs: list[tuple[float, float]] = []
    nats_runs: list[tuple[float, float]] = []
    for _ in range(repeats):
        rmq_runs.append(_rmq_run(mode, senders, count, body, address, broker_pid))
        if redis_server is not None:
            redis_runs.append(_redis_run(redis_server, senders, count, body))
        if nats_server is not None:
            nats_runs.append(_nats_run(nats_server, senders, count, body))
    rmq, redis_ref, nats_ref = (_stats(runs) for runs in (rmq_runs, redis_runs, nats_runs))
    assert rmq is not None
    name = "Producer.send(Message)" if mode == "send" else "Producer.send_async(Message)"
    notes = [_cpu_note("broker", rmq.cpu_us)]
    if redis_ref is not None:
        notes.append(_cpu_note("redis-server", redis_ref.cpu_us))
    notes.append(_nats_note(nats_ref, env.nats_missing))
    target = _target(mode, senders)
    reference_name = f"redis-py XADD, no pipeline, {senders.label()}"
    if redis_ref is None:
        notes.append(env.redis_missing)
    rows = [Row(f"{name}, {senders.label()}", "msg/s", rmq.rate, reference_name,
                redis_ref.rate if redis_ref else None, target, "; ".join(filter(None, notes)))]
    if mode == "send" and senders.count == 1:
        rows.append(Row("broker CPU per single-message send (SDK over the remoting port)", "µs", rmq.cpu_us,
                        target=Target(max_value=TARGET_REMOTING_CPU_US, unit="µs")))
    return rows


def _target(mode: str, senders: Senders) -> Target | None:
    """Issue 41: 32 senders of send ≥ 1.0× Redis; send_async from one process ≥ 2× one redis-py client."""
    if mode == "send" and senders.count == 32:
        return Target(min_ratio=1.0)
    if mode == "send_async" and senders.count == 1:
        return Target(min_ratio=2.0)
    return None


def _cpu_note(server: str, cpu_us: Stats) -> str:
    return f"{server} CPU {cpu_us.median:.0f} µs/request ({cpu_us.low:.0f}–{cpu_us.high:.0f})"


def _nats_note(nats_ref: Measured | None, missing: str) -> str:
    if nats_ref is None:
        return missing or "NATS JetStream reference skipped"
    return (f"NATS JetStream publish awaited, same senders: {nats_ref.rate.median:,.0f} msg/s "
            f"({_cpu_note('nats-server', nats_ref.cpu_us)})")


def _stats(runs: list[tuple[float, float]]) -> Measured | None:
    if not runs:
        return None
    return Measured(Stats.of([rate for rate, _ in runs]), Stats.of([cpu for _, cpu in runs]))


def _measure(run: Callable[[], tuple[float, float]], repeats: int) -> Measured:
    measured = _stats([run() for _ in range(repeats)])
    assert measured is not None
    return measured


@contextlib.contextmanager
def _server_cpu(pid: int, count: int, into: list[float]) -> Iterator[None]:
    """Appends the server's CPU per request (µs) over the block to `into`."""
    before = machine.process_cpu_seconds(pid)
    yield
    into.append((machine.process_cpu_seconds(pid) - before) / count * 1e6)


def _pid(process: subprocess.Popen[bytes] | None) -> int:
    assert process is not None, "the server is not running"
    return process.pid


# ---------------------------------------------------------------- rmq


def _rmq_run(mode: str, senders: Senders, count: int, body: bytes, address: str, broker_pid: int
             ) -> tuple[float, float]:
    per_thread = max(count // senders.count, 1)
    return parallel_measure(rmq_senders, (address, mode, senders.threads, per_thread, body),
                            senders.processes, per_thread * senders.threads, server_pid=broker_pid)


def rmq_senders(address: str, mode: str, threads: int, per_thread: int, body: bytes) -> Callable[[], None]:
    """One process's senders: `threads` threads sharing one Producer (started, its route and
    connection made before the clock starts), each sending `per_thread` messages one per call
    (`send`), or keeping them in flight (`send_async`). The process's end closes it."""
    producer = Producer(address)
    producer.start()
    producer.send(Message(TOPIC, body))
    return functools.partial(_threads, threads, lambda: _rmq_sender(producer, mode, per_thread, body))


def _rmq_sender(producer: Producer, mode: str, count: int, body: bytes) -> None:
    if mode == "send":
        for _ in range(count):
            producer.send(Message(TOPIC, body))
        return
    futures: list[Future[Any]] = [producer.send_async(Message(TOPIC, body)) for _ in range(count)]
    for future in futures:
        future.result()


def _threads(count: int, work: Callable[[], None]) -> None:
    """`work` on `count` threads at once (the calling thread is one of them); re-raises a failure."""
    failures: list[BaseException] = []

    def guarded() -> None:
        try:
            work()
        except BaseException as error:  # noqa: BLE001 - re-raised in the caller
            failures.append(error)

    others = [threading.Thread(target=guarded) for _ in range(count - 1)]
    for thread in others:
        thread.start()
    guarded()
    for thread in others:
        thread.join()
    if failures:
        raise failures[0]


# ---------------------------------------------------------------- references


def _redis_run(server: RedisServer, senders: Senders, count: int, body: bytes) -> tuple[float, float]:
    per_thread = max(count // senders.count, 1)
    server.client().delete(REDIS_KEY)
    measured = parallel_measure(redis_senders, (server.port, senders.threads, per_thread, body),
                                senders.processes, per_thread * senders.threads,
                                server_pid=_pid(server.process))
    server.client().delete(REDIS_KEY)
    return measured


def redis_senders(port: int, threads: int, per_thread: int, body: bytes) -> Callable[[], None]:
    """One process's senders: one redis-py client (its connection pool), one XADD per call."""
    client = redis.Redis(host="127.0.0.1", port=port, max_connections=threads)
    client.ping()

    def sender() -> None:
        for _ in range(per_thread):
            client.xadd(REDIS_KEY, {"body": body})

    return functools.partial(_threads, threads, sender)


def _nats_run(server: NatsServer, senders: Senders, count: int, body: bytes) -> tuple[float, float]:
    per_task = max(count // senders.count, 1)
    asyncio.run(_fresh_stream(server.url))
    return parallel_measure(nats_senders, (server.url, senders.threads, per_task, body),
                            senders.processes, per_task * senders.threads, server_pid=_pid(server.process))


async def _fresh_stream(url: str) -> None:
    connection, _ = await fresh_stream(url, NATS_SUBJECT)
    await connection.close()


def nats_senders(url: str, tasks: int, per_task: int, body: bytes) -> Callable[[], None]:
    """One process's senders: one NATS connection (made before the clock starts), `tasks`
    coroutines each awaiting every JetStream publish (its ack) before the next."""
    loop = event_loop.loop_factory()()
    connection = loop.run_until_complete(nats.connect(url))
    jetstream = connection.jetstream()

    async def sender() -> None:
        for _ in range(per_task):
            await jetstream.publish(NATS_SUBJECT, body)

    async def senders() -> None:
        await asyncio.gather(*(sender() for _ in range(tasks)))

    return functools.partial(loop.run_until_complete, senders())


# ---------------------------------------------------------------- official clients


def _cpp_row(remoting_address: str, broker_pid: int, count: int, repeats: int, body: bytes) -> Row:
    """One thread of the C++ client's send_sync, in a process of its own (cpp_send_sync.py)."""
    name = "official 4.x C++ client send_sync (PyPI rocketmq 0.4.4), 1 thread, remoting port"
    problem = cpp_client_problem()
    if problem is not None:
        return not_measured(name, problem, Target(min_value=8000, unit="msg/s"))
    try:
        runs = [_cpp_run(remoting_address, broker_pid, count, body) for _ in range(repeats)]
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as error:
        return not_measured(name, one_line(str(error)), Target(min_value=8000, unit="msg/s"))
    measured = _stats(runs)
    assert measured is not None
    return Row(name, "msg/s", measured.rate, target=Target(min_value=8000, unit="msg/s"),
               note=_cpu_note("broker", measured.cpu_us) + f" (target ≤ {TARGET_REMOTING_CPU_US:g} µs)")


def _cpp_run(remoting_address: str, broker_pid: int, count: int, body: bytes) -> tuple[float, float]:
    scenario = {"address": remoting_address, "topic": TOPIC, "count": count, "body": body.hex()}
    process = subprocess.Popen([sys.executable, str(CPP_SCRIPT), json.dumps(scenario)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=client_env())
    assert process.stdin is not None and process.stdout is not None
    try:
        ready = process.stdout.readline()     # warmed up: route, connection, heartbeat
        if ready.strip() != "ready":
            failure = process.stderr.read()[-500:]
            raise RuntimeError(f"the C++ client did not start: {ready.strip()} {failure}")
        cpu: list[float] = []
        with _server_cpu(broker_pid, count, cpu):
            process.stdin.write("go\n")
            process.stdin.flush()
            result = json.loads(process.stdout.readline())
        process.wait(CPP_TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if result.get("failed"):
        raise RuntimeError(f"the C++ client's send_sync failed: {result['failed']}")
    return float(result["rate"]), cpu[0]


def _rocketmq5_rows(address: str, broker_pid: int, count: int, repeats: int, body: bytes) -> list[Row]:
    """One thread of the official RocketMQ 5 Python client's Producer.send (gRPC)."""
    name = "official RocketMQ 5 Python client Producer.send, 1 thread, gRPC"
    try:
        import rocketmq
    except ImportError:
        return [not_measured(name, "rocketmq-python-client is not installed")]
    config = rocketmq.ClientConfiguration(address, rocketmq.Credentials())
    producer = rocketmq.Producer(config, (TOPIC,))
    producer.startup()
    try:
        official_send(rocketmq, producer, body, 20, TOPIC)    # warm up
        runs = []
        for _ in range(repeats):
            cpu: list[float] = []
            with _server_cpu(broker_pid, count, cpu):
                start = time.perf_counter()
                official_send(rocketmq, producer, body, count, TOPIC)
                rate = count / (time.perf_counter() - start)
            runs.append((rate, cpu[0]))
    finally:
        producer.shutdown()
    measured = _stats(runs)
    assert measured is not None
    return [Row(name, "msg/s", measured.rate, note=_cpu_note("broker", measured.cpu_us)),
            Row("broker CPU per single-message send (RocketMQ 5 gRPC)", "µs", measured.cpu_us,
                target=Target(max_value=TARGET_GRPC_CPU_US, unit="µs"))]
