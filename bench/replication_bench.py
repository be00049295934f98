"""Section 10: replication (docs/replication.md). Produce to a SYNC_MASTER, which acknowledges a
batch once its slave holds it, against the same produce to an ASYNC_MASTER with a slave, the
slave's lag behind an ASYNC_MASTER under steady load, and how fast an empty slave catches up
(the transfer itself: a gRPC bidirectional stream of <= 1 MiB CommitLog chunks)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime

from bench.broker_bench import PRODUCE_BATCH
from bench.environment import FLUSH, Environment, _running
from bench.harness import Row, Stats, Target, measure_pair, percentile, rate
from bench.workload import body_of
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.v1 import rmq_pb2
from testing import processes

TOPIC = "bench-replication"
LAG_SAMPLE_S = 0.01


@contextmanager
def broker_group(env: Environment, name: str, role: str) -> Iterator[tuple[RmqClient, str]]:
    """A master with `role` and its slave on fresh stores; yields a client of the master and the
    master's address once the slave is connected."""
    directory = env.directory(name)
    with ExitStack() as stack:
        master = stack.enter_context(_running(processes.group_member(directory, name, 0, role, flush=FLUSH)))
        slave = processes.group_member(directory, name, 1, "SLAVE", master=master.address, flush=FLUSH)
        stack.enter_context(_running(slave))
        client = stack.enter_context(RmqClient(master.address))
        deadline = time.monotonic() + 30
        while not client.broker_status(master.address).slaves:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the slave of {name} did not connect")
            time.sleep(0.05)
        client.create_topic(TOPIC, queues=8)
        yield client, master.address


def produce_acknowledged(client: RmqClient, count: int, body: bytes) -> None:
    """`count` messages in batches; every batch must be acknowledged OK (held by the slave under
    SYNC_MASTER), else the figure would not measure replication."""
    batch = [OutgoingMessage(body) for _ in range(PRODUCE_BATCH)]
    for start in range(0, count, PRODUCE_BATCH):
        result = client.send(TOPIC, batch[: min(PRODUCE_BATCH, count - start)])
        if result.status != rmq_pb2.OK:
            raise RuntimeError(f"a batch was stored on the master only: {rmq_pb2.Code.Name(result.status)}")


def lag_samples(client: RmqClient, address: str, count: int, body: bytes) -> list[float]:
    """The slave's lag (KiB: master max offset - slave acknowledged offset) every 10 ms while one
    producer sends `count` messages."""
    done = threading.Event()
    samples: list[float] = []

    def sample() -> None:
        while not done.is_set():
            slaves = client.broker_status(address).slaves
            if slaves:
                samples.append(slaves[0].lag_bytes / 1024)
            time.sleep(LAG_SAMPLE_S)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        produce_acknowledged(client, count, body)
    finally:
        done.set()
        sampler.join()
    return samples


def catch_up_mib_per_s(env: Environment, run: int, count: int) -> float:
    """A slave started empty behind a master holding `count` 1 KiB messages: MiB/s from its first
    chunk until it holds every byte (HAService.Transfer, one chunk of <= 1 MiB per message)."""
    directory = env.directory(f"catch-up-{run}")
    name = f"catch-up-{run}"
    with _running(processes.group_member(directory, name, 0, "ASYNC_MASTER", flush=FLUSH)) as master, \
            RmqClient(master.address) as client:
        client.create_topic(TOPIC, queues=8)
        batch = [OutgoingMessage(body_of(1024)) for _ in range(PRODUCE_BATCH)]
        for start in range(0, count, PRODUCE_BATCH):
            client.send(TOPIC, batch[: min(PRODUCE_BATCH, count - start)])
        total = client.broker_status(master.address).commit_log_max_offset
        slave = processes.group_member(directory, name, 1, "SLAVE", master=master.address, flush=FLUSH)
        with _running(slave):
            while client.broker_status(slave.address).commit_log_max_offset < total:
                time.sleep(0.005)
            done = time.time()
            return total / (1 << 20) / (done - replication_started(slave.log()))


def replication_started(log: str) -> float:
    """Epoch seconds of the slave's "replicating from master" line (its first chunk arrived), so
    that the process start is left out."""
    line = next(line for line in log.splitlines() if "replicating from master" in line)
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


def replication_rows(env: Environment) -> list[Row]:
    """Batched SendMessage (256 x 100 B per call, 8 queues, one producer) to a SYNC_MASTER with
    a slave, every batch acknowledged OK (the slave holds it), against the same to an
    ASYNC_MASTER with a slave; then the slave's lag behind the ASYNC_MASTER (master max offset
    minus the slave's acknowledged offset, sampled every 10 ms) while one producer sends."""
    count = env.scale.produce_messages
    body = body_of(100)
    with broker_group(env, "sync", "SYNC_MASTER") as (sync_client, _), \
            broker_group(env, "async", "ASYNC_MASTER") as (async_client, async_address):
        subject, reference = measure_pair(
            lambda: rate(count, lambda: produce_acknowledged(sync_client, count, body)),
            lambda: rate(count, lambda: produce_acknowledged(async_client, count, body)),
            env.scale.repeats)
        runs = [lag_samples(async_client, async_address, count, body) for _ in range(env.scale.repeats)]
    p99 = Stats.of([percentile(run, 0.99) for run in runs])
    catch_up = Stats.of([catch_up_mib_per_s(env, run, count) for run in range(env.scale.repeats)])
    peak = max(max(run) for run in runs)
    return [
        Row(f"produce to a SYNC_MASTER with a slave, 100 B bodies, batch {PRODUCE_BATCH}, 1 producer",
            "msg/s", subject, "same to an ASYNC_MASTER with a slave", reference, Target(min_ratio=0.5)),
        Row("slave lag behind an ASYNC_MASTER under that produce, p99 of 10 ms samples", "KiB", p99,
            note=f"peak {peak:.0f} KiB over {sum(map(len, runs))} samples"),
        Row(f"an empty slave catching up {count} x 1 KiB messages", "MiB/s", catch_up),
    ]
