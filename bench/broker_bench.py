"""Rows 2-4 and produce-vs-batch-size (row 6): one broker process against Redis Streams,
both on loopback, measured alternately in the same run."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import redis

from bench import delivery_latency, grpc_floor, machine
from bench import nats_reference as nr
from bench import redis_reference as rr
from bench.environment import Environment
from bench.harness import (
    Row,
    Stats,
    Target,
    measure_alternating,
    measure_pair,
    percentile,
    rate,
    wake_latency_ms,
)
from bench.parallel import parallel_rate
from bench.workload import GROUP, PULL_BATCH, body_of, produce, pull_range, single_queue
from rmq.connector.client import OutgoingMessage, PullResult, RmqClient
from rmq.connector.errors import RmqError

T = TypeVar("T")
R = TypeVar("R")

BODY_SIZES = (100, 1024)
PRODUCE_BATCH = 256
PRODUCERS = 2
BATCH_SIZES = (1, 16, 256, 1024)
CALLS_AT_BATCH_ONE = 1000   # batch 1 at ~1-2K calls/s; section 16 measures one message per request in depth
LONG_POLL_SUSPEND_MS = 5000
SETTLE_S = 0.02   # both readers get this long to park before the write that wakes them
# performance targets (BENCHMARKS.md "Targets", which a run writes from these)
PRODUCE_TARGET = Target(min_ratio=1.2)
PULL_TARGET = Target(min_ratio=3.0)
WAKE_P50_TARGET = Target(max_value=1.0, unit="ms")
WAKE_P99_TARGET = Target(max_value=2.0, unit="ms")
DELIVERY_P50_TARGET = Target(max_value=1.0, unit="ms")   # issue 29 item 1, and issue 41
DELIVERY_P99_TARGET = Target(max_value=3.0, unit="ms")   # issue 41's goal (issue 29 item 1 asked < 5 ms)
DELIVERY_XREAD_TARGET = Target(max_ratio=2.0)


def size_label(size: int) -> str:
    return "1 KiB" if size == 1024 else f"{size} B"


def produce_rows(env: Environment) -> list[Row]:
    """Batched SendMessage (256 messages per call) into a topic of 8 queues from one producer,
    against XADD pipelined 256 deep into one stream from one redis-py client; then two producer
    processes started together against two redis-py client processes (one stream each)."""
    count = env.scale.produce_messages
    rows = []
    with env.broker() as broker, env.redis() as redis_server, RmqClient(broker.address) as client:
        client.create_topic("bench-produce", queues=8)
        redis_client = redis_server.client() if redis_server else None
        for size in BODY_SIZES:
            body = body_of(size)
            subject, reference = measure_pair(
                lambda body=body: rate(count, lambda: produce(client, "bench-produce", count, body,
                                                               PRODUCE_BATCH)),
                _maybe(redis_client, lambda c, body=body: rr.xadd_rate(c, body, count)),
                env.scale.repeats,
            )
            rows.append(Row(f"produce, {size_label(size)} bodies, batch {PRODUCE_BATCH}, 1 producer",
                            "msg/s", subject, "XADD pipelined 256", reference, PRODUCE_TARGET,
                            env.redis_missing))
        rows.append(_parallel_produce_row(env, broker.address, redis_server))
    return rows


def _parallel_produce_row(env: Environment, address: str, redis_server: rr.RedisServer | None) -> Row:
    """Two producer processes started together, against two redis-py client processes."""
    each, body = env.scale.produce_messages // PRODUCERS, body_of(100)
    subject, reference = measure_pair(
        lambda: parallel_rate(produce_worker, (address, "bench-produce", each, body), PRODUCERS, each),
        _maybe(redis_server, lambda s: parallel_rate(xadd_worker, (s.port, each, body), PRODUCERS, each)),
        env.scale.repeats,
    )
    return Row(f"produce, 100 B bodies, batch {PRODUCE_BATCH}, {PRODUCERS} producer processes", "msg/s",
               subject, f"XADD pipelined 256, {PRODUCERS} client processes", reference, PRODUCE_TARGET,
               env.redis_missing)


def produce_worker(address: str, topic: str, count: int, body: bytes) -> None:
    """One producer process's share of the parallel produce row."""
    with RmqClient(address) as client:
        produce(client, topic, count, body, PRODUCE_BATCH)


def xadd_worker(port: int, count: int, body: bytes) -> None:
    """One redis-py client process's share of the parallel XADD reference."""
    client = redis.Redis(host="127.0.0.1", port=port)
    rr.xadd(client, f"bench-xadd-{port}-{os.getpid()}", body, count)


def pull_rows(env: Environment) -> list[Row]:
    """One queue read from its first to its last offset in pulls of up to 1024 messages,
    each decoded into an Arrow RecordBatch by `rmq.connector.spark.message_decoder.decode` (and once
    more without decoding), against XRANGE COUNT 1024 over a stream holding as many entries.
    CPU per message of the decoded runs: the broker process's (/proc) and this reader
    process's (`time.process_time`), over the same runs."""
    with env.broker() as broker, env.redis() as redis_server, RmqClient(broker.address) as client:
        redis_client = redis_server.client() if redis_server else None
        return [row for size in BODY_SIZES
                for row in _pull_rows_for(env, client, redis_client, size, broker.process.pid)]


def _pull_rows_for(env: Environment, client: RmqClient, redis_client: redis.Redis | None,
                   size: int, broker_pid: int) -> list[Row]:
    count = env.scale.pull_messages
    topic, key, body = f"bench-pull-{size}", f"bench-xrange-{size}", body_of(size)
    client.create_topic(topic, queues=1)
    produce(client, topic, count, body, 1024, queue_id=0)
    if redis_client is not None:
        rr.xadd(redis_client, key, body, count)
    mq = single_queue(client, topic)
    requests: list[int] = []
    broker_cpu_us: list[float] = []
    reader_cpu_us: list[float] = []

    def pull(with_decode: bool) -> float:
        broker_before, reader_before = machine.process_cpu_seconds(broker_pid), time.process_time()
        result = rate(count, lambda: requests.append(pull_range(client, mq, 0, count, with_decode)))
        if with_decode:
            broker_cpu_us.append((machine.process_cpu_seconds(broker_pid) - broker_before) / count * 1e6)
            reader_cpu_us.append((time.process_time() - reader_before) / count * 1e6)
        return result

    xrange = _maybe(redis_client, lambda c: rr.xrange_rate(c, key, count))
    # both kinds of pull share one XRANGE run per repeat (before the fourth stop each had its own)
    decoded, raw, reference = measure_alternating([lambda: pull(True), lambda: pull(False), xrange],
                                                  env.scale.repeats)
    assert decoded is not None and raw is not None
    if redis_client is not None:
        redis_client.delete(key)
    note = f"{count:,} messages, {count / requests[-1]:.0f} messages per pull on average. {env.redis_missing}"
    return [
        Row(f"pull + Arrow decode, {size_label(size)} bodies, max {PULL_BATCH}/pull", "msg/s", decoded,
            "XRANGE COUNT 1024", reference, PULL_TARGET, note.strip()),
        Row(f"pull without decode, {size_label(size)} bodies", "msg/s", raw, "XRANGE COUNT 1024",
            reference, PULL_TARGET),
        Row(f"broker CPU per pulled message, {size_label(size)} bodies", "µs", Stats.of(broker_cpu_us)),
        Row(f"reader CPU per message (pull + decode), {size_label(size)} bodies", "µs",
            Stats.of(reader_cpu_us)),
    ]


def latency_rows(env: Environment) -> list[Row]:
    """Issue 29 item 1: Producer.send started → the PushConsumer's listener called, one 100-byte
    message every SETTLE_S, both at their default options, against a broker serving its
    remoting port (the SDK's hot path, bench/delivery_latency.py). Beside it the raw wire: a
    pull held on that port (RmqClient.pull_async) woken by one RmqClient.send. References in
    the same run: Redis XREAD BLOCK woken by one XADD from a second connection, and a NATS
    JetStream fetch(1) woken by one publish, each after the same settle time. Each run gives
    its p50 and p99; the rows give the median and spread of those over runs."""
    samples = env.scale.latency_samples
    body = body_of(100)
    with (delivery_latency.broker(env.directory("delivery")) as broker, env.redis() as redis_server,
          env.nats() as nats_server):
        runs = [(delivery_latency.push_delivery_latencies_ms(broker.address, samples, SETTLE_S),
                 _raw_wire_latencies(broker.address, samples, body),
                 rr.xread_block_latencies(redis_server, samples, body, SETTLE_S) if redis_server else [],
                 nr.wake_latencies(nats_server, samples, body, SETTLE_S) if nats_server else [])
                for _ in range(env.scale.repeats)]
        note = f"{samples} deliveries per run. {env.redis_missing} {env.nats_missing}"
        rows = _delivery_rows(runs, note)
        with grpc_floor.bare_server(env.directory("grpc-floor")) as address:
            for idle_s in (0.0, SETTLE_S):
                rows += _floor_rows(address, redis_server, samples, env.scale.repeats, idle_s)
        return rows


def _delivery_rows(runs: list[tuple[list[float], ...]], note: str) -> list[Row]:
    """(delivery, raw wire, XREAD BLOCK, JetStream) latencies of each run as rows."""
    def over_runs(index: int, fraction: float) -> Stats | None:
        values = [percentile(run[index], fraction) for run in runs if run[index]]
        return Stats.of(values) if values else None

    delivery = "Producer.send → PushConsumer listener, defaults, {}"
    xread, nats_wake = "XREAD BLOCK wake {}", "JetStream fetch(1) wake {}"
    return [
        Row(delivery.format("p50"), "ms", over_runs(0, 0.5), xread.format("p50"), over_runs(2, 0.5),
            DELIVERY_P50_TARGET, note.strip()),
        Row(delivery.format("p99"), "ms", over_runs(0, 0.99), xread.format("p99"), over_runs(2, 0.99),
            DELIVERY_P99_TARGET),
        Row(delivery.format("p50, against XREAD BLOCK"), "ms", over_runs(0, 0.5), xread.format("p50"),
            over_runs(2, 0.5), DELIVERY_XREAD_TARGET),
        Row(delivery.format("p50, against JetStream"), "ms", over_runs(0, 0.5), nats_wake.format("p50"),
            over_runs(3, 0.5)),
        Row("raw wire: held pull on the remoting port woken by one send, p50", "ms", over_runs(1, 0.5),
            xread.format("p50"), over_runs(2, 0.5), WAKE_P50_TARGET),
        Row("raw wire: held pull on the remoting port woken by one send, p99", "ms", over_runs(1, 0.99),
            xread.format("p99"), over_runs(2, 0.99), WAKE_P99_TARGET),
    ]


def _raw_wire_latencies(address: str, samples: int, body: bytes) -> list[float]:
    """ms from just before RmqClient.send of one message to the answer of a pull held for it
    (RmqClient.pull_async, answered on the client's reader thread), after SETTLE_S each."""
    with RmqClient(address) as consumer, RmqClient(address) as producer:
        if "bench-latency" not in {t.topic_name for t in producer.list_topics()}:
            producer.create_topic("bench-latency", queues=1)
        mq = single_queue(consumer, "bench-latency")
        message = [OutgoingMessage(body=body, queue_id=0)]
        offset = [consumer.queue_offsets(mq).max_offset]

        def held_pull() -> None:
            answered = threading.Event()

            def done(result: PullResult | None, error: RmqError | None) -> None:
                if result is None or result.messages.count != 1:
                    raise RuntimeError(f"held pull returned {result or error}")
                offset[0] = result.next_begin_offset
                answered.set()
            consumer.pull_async(mq, offset[0], 32, group=GROUP, suspend_timeout_ms=LONG_POLL_SUSPEND_MS,
                                callback=done)
            if not answered.wait(LONG_POLL_SUSPEND_MS / 1000):
                raise RuntimeError("the held pull was not answered")

        return [wake_latency_ms(held_pull, lambda: producer.send("bench-latency", message), SETTLE_S)
                for _ in range(samples)]


def _floor_rows(address: str, redis_server: rr.RedisServer | None, samples: int, repeats: int,
                idle_s: float) -> list[Row]:
    """Bare gRPC calls beside Redis PING, back to back or each after `idle_s` (as a wake, whose
    transit is one such round trip after both sides sat idle): how low a wake can go here."""
    when = f"each after {idle_s * 1000:.0f} ms idle as a wake" if idle_s else "back to back"
    return _percentile_rows(
        f"floor: one unary call to a bare Python grpc.aio server, {when}, {{}}",
        lambda: grpc_floor.round_trips_ms(address, samples, idle_s),
        "Redis PING", _maybe(redis_server, lambda s: rr.ping_latencies(s, samples, idle_s)), repeats,
        note="" if idle_s else "no rmq code on either side: what Python gRPC itself costs per call on "
                               "this machine (bench/grpc_floor.py)")


def _percentile_rows(label: str, subject: Callable[[], list[float]], reference_label: str,
                     reference: Callable[[], list[float]] | None, repeats: int,
                     targets: tuple[Target | None, Target | None] = (None, None), note: str = ""
                     ) -> list[Row]:
    """p50 and p99 of each run (`label` and `reference_label` name the percentile where they say
    {}); the rows give the median and spread of those over runs."""
    runs = [(subject(), reference() if reference else []) for _ in range(repeats)]
    rows = []
    for name, fraction, target in (("p50", 0.50, targets[0]), ("p99", 0.99, targets[1])):
        mine = Stats.of([percentile(s, fraction) for s, _ in runs])
        theirs = Stats.of([percentile(r, fraction) for _, r in runs]) if reference else None
        rows.append(Row(label.format(name), "ms", mine, f"{reference_label} {name}", theirs, target,
                        note.strip() if name == "p50" else ""))
    return rows


def batch_size_rows(env: Environment) -> list[Row]:
    """Produce throughput (100-byte bodies, one producer) by messages per SendMessage call,
    against XADD pipelined to the same depth. Batch 1 sends 2,000 calls per run."""
    body = body_of(100)
    rows = []
    with env.broker() as broker, env.redis() as redis_server, RmqClient(broker.address) as client:
        client.create_topic("bench-batch", queues=8)
        redis_client = redis_server.client() if redis_server else None
        for batch in BATCH_SIZES:
            count = min(env.scale.produce_messages, batch * CALLS_AT_BATCH_ONE)
            subject, reference = measure_pair(
                lambda batch=batch, count=count: rate(count, lambda: produce(client, "bench-batch", count,
                                                                             body, batch)),
                _maybe(redis_client, lambda c, batch=batch, count=count: rr.xadd_rate(c, body, count, batch)),
                env.scale.repeats,
            )
            rows.append(Row(f"produce, batch {batch}, 100 B bodies", "msg/s", subject,
                            f"XADD pipelined {batch}", reference, note=env.redis_missing))
    return rows


def _maybe(resource: T | None, run: Callable[[T], R]) -> Callable[[], R] | None:
    """`run` bound to `resource`, or None when the resource (Redis) is unavailable."""
    return None if resource is None else lambda: run(resource)
