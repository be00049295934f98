"""Section 16: one message per request (issue 41). Every
official RocketMQ client sends one message per request, and so do most services: this section
measures that path, from the same numbers of senders as its references, in one run.

A sender is a thread (a coroutine for NATS); N senders are 1 process × 1 thread, or 4 processes
× N/4 threads (each process one Producer, one redis-py client, one NATS connection, as a service
holds one; bench/one_message_senders.py). Every rmq row reports the broker's CPU per request
(its /proc utime + stime over the timed sends, divided by the messages) beside the rate; the
Redis and NATS references report their servers' CPU the same way.

The runs alternate: each repeat runs every kind of request of one sender count once, in turn
(rmq's, the official clients', Redis's and NATS's), so that load from other processes on this
shared machine hits them alike; the figures are medians over the repeats."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from bench import machine
from bench.environment import Environment
from bench.harness import Row, Stats, Target, not_measured, one_line
from bench.nats_reference import NatsServer, fresh_stream
from bench.one_message_senders import NATS_SUBJECT, REDIS_KEY, TOPIC, nats_senders, redis_senders, rmq_senders
from bench.parallel import parallel_measure
from bench.redis_reference import RedisServer
from bench.rocketmq_v2_bench import official_send
from rmq.connector.client import RmqClient
from testing.cpp_client import client_env, cpp_client_problem

BODY_SIZE = 100
QUEUES = 8
COMPARED_SENDERS = (1, 32)          # the rows against Redis and NATS
SCALING_SENDERS = (1, 8, 32, 128)   # the scaling curve (1 and 32 are the compared rows' runs)
PROCESSES = 4                       # senders > 1 run as 4 processes × senders/4 threads
CPP_SCRIPT = Path(__file__).with_name("cpp_send_sync.py")
CPP_TIMEOUT_S = 600
TARGET_REMOTING_CPU_US = 40.0       # issue 41: broker CPU per single send, remoting port
TARGET_GRPC_CPU_US = 80.0           # ... either gRPC port
REMOTING_CPU_TARGET = Target(max_value=TARGET_REMOTING_CPU_US, unit="µs")
GRPC_CPU_TARGET = Target(max_value=TARGET_GRPC_CPU_US, unit="µs")
CPP_RATE_TARGET = Target(min_value=8000, unit="msg/s")   # issue 41: the C++ client's send_sync, 1 thread
# what makes one timed run fail without losing the section's other rows
RUN_FAILURES = (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired)
NAMES = {"send": "Producer.send(Message)", "send_async": "Producer.send_async(Message)",
         "cpp": "official 4.x C++ client send_sync (PyPI rocketmq 0.4.4), 1 thread, remoting port",
         "rocketmq5": "official RocketMQ 5 Python client Producer.send, 1 thread, gRPC"}

Run = Callable[[], tuple[float, float]]   # one timed run: (msg/s, the server's CPU µs per request)


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


Outcome = Measured | str     # the figures, or why the runs could not be made


def one_message_rows(env: Environment) -> list[Row]:
    """1 and 32 senders of rmq `Producer.send(Message)` (blocking, one message per call) and
    of `Producer.send_async` (each sender keeps up to 512 sends in flight), one thread of the
    official RocketMQ 4.x C++ client's `send_sync` (PyPI rocketmq 0.4.4, over the remoting
    port) and of the official RocketMQ 5 Python client's `send` (gRPC), each beside redis-py
    XADD without a pipeline and NATS JetStream `publish` awaited one at a time per sender, from
    the same number of senders, alternating in the same run; then the scaling curve of
    `Producer.send` from 1, 8, 32 and 128 senders, each beside XADD from as many (8 and 128:
    one run each). 100-byte bodies, a topic of 8 queues, the broker at its defaults (ASYNC
    flush, remoting port on); the broker's CPU per request with every rmq row (issue 41's
    targets: ≤ 40 µs on the remoting port, ≤ 80 µs on gRPC)."""
    body = b"m" * BODY_SIZE    # text: the C++ client's binding takes a body as a C string
    # messages per run: 10,000 from many senders (~3 s each at 3-4K msg/s), 5,000 from one (2-4 s),
    # 2,500 from the official RocketMQ 5 client (~700 msg/s); the broker's CPU over any of them is
    # a second or more, so its /proc ticks (10 ms) stay below 1 %
    many = max(env.scale.produce_messages // 10, 1000)
    single = max(env.scale.produce_messages // 20, 300)
    repeats = env.scale.repeats
    with env.broker() as broker, env.redis() as redis_server, env.nats() as nats_server:
        with RmqClient(broker.address) as client:
            client.create_topic(TOPIC, queues=QUEUES)
            remoting = client.list_broker_groups()["broker-a"][0].remoting_address
        broker_pid = _pid(broker.process)

        def runs(n: int, modes: tuple[str, ...]) -> dict[str, Run | str]:
            count = single if n == 1 else many
            kinds: dict[str, Run | str] = {
                mode: _partial_run(_rmq_run, mode, Senders(n), count, body, broker.address, broker_pid)
                for mode in modes}
            if redis_server is not None:
                kinds["redis"] = _partial_run(_redis_run, redis_server, Senders(n), count, body)
            if nats_server is not None and n in COMPARED_SENDERS:
                kinds["nats"] = _partial_run(_nats_run, nats_server, Senders(n), count, body)
            return kinds

        cpp = _cpp_sender(remoting, broker_pid, single, body)
        # the official RocketMQ 5 producer lives only through the one-sender runs: its heartbeat's
        # deadline is short, and the many-sender runs keep the broker's loop busy
        with _rocketmq5_sender(broker.address, broker_pid, single // 2, body) as rocketmq5:
            one = alternate({**runs(1, ("send", "send_async")), "cpp": cpp, "rocketmq5": rocketmq5}, repeats)
        thirty_two = alternate(runs(32, ("send", "send_async")), repeats)
        curve = {1: one, 32: thirty_two, **{n: alternate(runs(n, ("send",)), 1)
                                            for n in SCALING_SENDERS if n not in COMPARED_SENDERS}}
    return [*one_sender_rows(one, env),
            *(_subject_row(mode, Senders(32), thirty_two, env) for mode in ("send", "send_async")),
            *(_subject_row("send", Senders(n), curve[n], env, curve=True) for n in SCALING_SENDERS)]


def _partial_run(run: Callable[..., tuple[float, float]], *args: object) -> Run:
    return lambda: run(*args)


def alternate(runs: Mapping[str, Run | str], repeats: int) -> dict[str, Outcome]:
    """Each run once per repeat, in turn, so load from other processes hits them alike. A run
    given as a reason is not made; one that fails is dropped from the later repeats and answers
    its failure instead of figures, without losing the others."""
    samples: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    failed = {name: run for name, run in runs.items() if isinstance(run, str)}
    for _ in range(repeats):
        for name, run in runs.items():
            if name in failed or isinstance(run, str):
                continue
            try:
                samples[name].append(run())
            except RUN_FAILURES as error:
                failed[name] = one_line(f"{type(error).__name__}: {error}")
    return {name: failed.get(name) or _stats(samples[name]) for name in runs}


def one_sender_rows(one: dict[str, Outcome], env: Environment) -> list[Row]:
    """Every kind of one-sender request against one redis-py client's XADD, and the broker's CPU
    per request of each against its target."""
    senders = Senders(1)
    redis_cpu = _reference_cpu(one)
    rows = [_subject_row(kind, senders, one, env) for kind in ("send", "send_async", "cpp", "rocketmq5")]
    for kind, port, target in (("send", "SDK over the remoting port", REMOTING_CPU_TARGET),
                               ("cpp", "official C++ client over the remoting port", REMOTING_CPU_TARGET),
                               ("rocketmq5", "official RocketMQ 5 client over gRPC", GRPC_CPU_TARGET)):
        name = f"broker CPU per single-message send ({port})"
        outcome = one.get(kind, "not run")
        rows.append(not_measured(name, outcome, target) if isinstance(outcome, str) else
                    Row(name, "µs", outcome.cpu_us, "redis-server CPU per XADD, 1 sender",
                        redis_cpu, target))
    return rows


def _subject_row(kind: str, senders: Senders, outcomes: dict[str, Outcome], env: Environment, *,
                 curve: bool = False) -> Row:
    """One kind of request's rate against XADD from the same senders in the same repeats, with
    the target issue 41 sets for it and the broker's, redis-server's and NATS's figures in the
    note; as a point of the scaling curve (`curve`), without target or NATS (the 1- and 32-sender
    rows have them)."""
    name = NAMES[kind] if kind in ("cpp", "rocketmq5") else f"{NAMES[kind]}, {senders.label()}"
    name, target = (f"scaling: {name}", None) if curve else (name, _target(kind, senders))
    subject = outcomes.get(kind, "not run")
    if isinstance(subject, str):
        return not_measured(name, subject, target)
    redis_ref = outcomes.get("redis", env.redis_missing or "Redis reference skipped")
    notes = [_cpu_note("broker", subject.cpu_us),
             _cpu_note("redis-server", redis_ref.cpu_us) if isinstance(redis_ref, Measured) else redis_ref]
    if not curve:
        notes.append(_nats_note(outcomes.get("nats", env.nats_missing or "NATS JetStream reference skipped")))
    return Row(name, "msg/s", subject.rate, f"redis-py XADD, no pipeline, {senders.label()}",
               redis_ref.rate if isinstance(redis_ref, Measured) else None, target, "; ".join(notes))


def _reference_cpu(outcomes: dict[str, Outcome]) -> Stats | None:
    redis_ref = outcomes.get("redis")
    return redis_ref.cpu_us if isinstance(redis_ref, Measured) else None


def _target(kind: str, senders: Senders) -> Target | None:
    """Issue 41: 32 senders of send ≥ 1.0× Redis; send_async from one process ≥ 2× one redis-py
    client; the C++ client's send_sync from one thread ≥ 8,000 msg/s."""
    if kind == "send" and senders.count == 32:
        return Target(min_ratio=1.0)
    if kind == "send_async" and senders.count == 1:
        return Target(min_ratio=2.0)
    return CPP_RATE_TARGET if kind == "cpp" else None


def _cpu_note(server: str, cpu_us: Stats) -> str:
    return f"{server} CPU {cpu_us.median:.0f} µs/request ({cpu_us.low:.0f}–{cpu_us.high:.0f})"


def _nats_note(nats_ref: Outcome) -> str:
    if isinstance(nats_ref, str):
        return nats_ref
    return (f"NATS JetStream publish awaited, same senders: {nats_ref.rate.median:,.0f} msg/s "
            f"({_cpu_note('nats-server', nats_ref.cpu_us)})")


def _stats(runs: list[tuple[float, float]]) -> Measured:
    return Measured(Stats.of([rate for rate, _ in runs]), Stats.of([cpu for _, cpu in runs]))


@contextlib.contextmanager
def _server_cpu(pid: int, count: int, into: list[float]) -> Iterator[None]:
    """Appends the server's CPU per request (µs) over the block to `into`."""
    before = machine.process_cpu_seconds(pid)
    yield
    into.append((machine.process_cpu_seconds(pid) - before) / count * 1e6)


def _pid(process: subprocess.Popen[bytes] | None) -> int:
    assert process is not None, "the server is not running"
    return process.pid


def _rmq_run(mode: str, senders: Senders, count: int, body: bytes, address: str, broker_pid: int
             ) -> tuple[float, float]:
    per_thread = max(count // senders.count, 1)
    return parallel_measure(rmq_senders, (address, mode, senders.threads, per_thread, body),
                            senders.processes, per_thread * senders.threads, server_pid=broker_pid)


# ---------------------------------------------------------------- references


def _redis_run(server: RedisServer, senders: Senders, count: int, body: bytes) -> tuple[float, float]:
    per_thread = max(count // senders.count, 1)
    server.client().delete(REDIS_KEY)
    measured = parallel_measure(redis_senders, (server.port, senders.threads, per_thread, body),
                                senders.processes, per_thread * senders.threads,
                                server_pid=_pid(server.process))
    server.client().delete(REDIS_KEY)
    return measured


def _nats_run(server: NatsServer, senders: Senders, count: int, body: bytes) -> tuple[float, float]:
    per_task = max(count // senders.count, 1)
    asyncio.run(_fresh_stream(server.url))
    return parallel_measure(nats_senders, (server.url, senders.threads, per_task, body),
                            senders.processes, per_task * senders.threads, server_pid=_pid(server.process))


async def _fresh_stream(url: str) -> None:
    connection, _ = await fresh_stream(url, NATS_SUBJECT)
    await connection.close()


# ---------------------------------------------------------------- official clients


def _cpp_sender(remoting_address: str, broker_pid: int, count: int, body: bytes) -> Run | str:
    """One thread of the C++ client's send_sync, in a process of its own per run
    (cpp_send_sync.py), or why it cannot run here."""
    return cpp_client_problem() or _partial_run(_cpp_run, remoting_address, broker_pid, count, body)


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


@contextlib.contextmanager
def _rocketmq5_sender(address: str, broker_pid: int, count: int, body: bytes) -> Iterator[Run | str]:
    """One thread of the official RocketMQ 5 Python client's Producer.send (gRPC): one producer,
    started and warmed up before the first run, shut down on exit; or why it cannot run here."""
    try:
        import rocketmq
    except ImportError:
        yield "rocketmq-python-client is not installed"
        return
    producer = rocketmq.Producer(rocketmq.ClientConfiguration(address, rocketmq.Credentials()), (TOPIC,))
    producer.startup()
    try:
        official_send(rocketmq, producer, body, 20, TOPIC)    # warm up

        def run() -> tuple[float, float]:
            cpu: list[float] = []
            with _server_cpu(broker_pid, count, cpu):
                start = time.perf_counter()
                official_send(rocketmq, producer, body, count, TOPIC)
                rate = count / (time.perf_counter() - start)
            return rate, cpu[0]

        yield run
    finally:
        producer.shutdown()
