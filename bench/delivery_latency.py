"""Row 4's end-to-end path (issue 29 item 1): Producer.send started → the PushConsumer's
listener called, one 100-byte message every SETTLE_S, both at their default options, in one
process (one clock). The broker serves its remoting port (by default), which the SDK then uses for
the send and the consumer's held pulls (docs/client-behaviour.md "Transport"); `over_grpc` names a
broker started with `--remoting-listen off`, the gRPC path.

`python -m bench.delivery_latency --samples 200 --runs 3` alternates the two brokers and Redis
XREAD BLOCK's wake, printing each run's p50/p99 and the load average (bench/NOTES.md);
`--cpu` prints the CPU time a delivery costs the broker and the client instead."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import queue
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from bench import redis_reference as rr
from bench.environment import Environment, Scale
from bench.harness import percentile
from rmq.connector import ConsumeConcurrentlyStatus, Message, Producer, PushConsumer
from rmq.connector.client import RmqClient
from testing import processes

TOPIC = "bench-delivery"
QUEUES = 8
SETTLE_S = 0.020
WARMUP = 20
FIRST_DELIVERY_S = 60.0   # a fresh group's rebalance and first pulls
_groups = itertools.count()   # one topic and group per measurement


@contextmanager
def broker(directory: Path, over_grpc: bool = False) -> Iterator[processes.ServerProcess]:
    """A broker (ASYNC flush, loopback) serving its remoting port unless `over_grpc`."""
    directory.mkdir(parents=True, exist_ok=True)
    extra = ["--remoting-listen", "off"] if over_grpc else []
    server = processes.broker(directory, flush="async", extra=extra)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def push_delivery_latencies_ms(address: str, samples: int, settle_s: float = SETTLE_S) -> list[float]:
    """ms from just before Producer.send to the listener's call, per message, after the
    consumer received WARMUP messages."""
    with push_path(address) as path:
        return deliveries_ms(*path, WARMUP + samples, settle_s)[WARMUP:]


PushPath = tuple[Producer, str, "queue.SimpleQueue[float]"]   # what deliveries_ms takes


@contextmanager
def push_path(address: str) -> Iterator[PushPath]:
    """A fresh topic, a PushConsumer of it at its defaults (its listener puts the time it was
    called) that received its first message, and a Producer."""
    run = next(_groups)
    topic = f"{TOPIC}-{run}"
    with RmqClient(address) as admin:
        admin.create_topic(topic, queues=QUEUES)
    received: queue.SimpleQueue[float] = queue.SimpleQueue()

    def listener(messages: list, context: object) -> ConsumeConcurrentlyStatus:
        received.put(time.perf_counter())
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(f"bench-delivery-{os.getpid()}-{run}", address)
    consumer.subscribe(topic)
    consumer.register_message_listener(listener)
    producer = Producer(address)
    consumer.start()
    producer.start()
    try:
        wait_first_delivery(producer, topic, received)
        yield producer, topic, received
    finally:
        producer.shutdown()
        consumer.shutdown()


def deliveries_ms(producer: Producer, topic: str, received: queue.SimpleQueue[float], count: int,
                  settle_s: float = SETTLE_S) -> list[float]:
    """`count` messages, one every `settle_s`: ms from just before each send to its listener call."""
    latencies = []
    for _ in range(count):
        time.sleep(settle_s)
        sent = time.perf_counter()
        producer.send(Message(topic, b"x" * 100))
        latencies.append((received.get(timeout=30) - sent) * 1000.0)
    return latencies


def cpu_per_delivery_ms(server: processes.ServerProcess, samples: int) -> tuple[float, float, float]:
    """CPU ms per delivery of the broker process and of this one (the consumer's and the
    producer's threads), and the broker's per SETTLE_S idle, over `samples` deliveries of
    push_delivery_latencies_ms's path after WARMUP: figures the machine's load hardly moves."""
    pid = server.process.pid
    idle_before = _cpu_s(pid)
    time.sleep(samples * SETTLE_S)
    idle = (_cpu_s(pid) - idle_before) * 1000 / samples
    with push_path(server.address) as path:
        deliveries_ms(*path, WARMUP)
        broker_before, client_before = _cpu_s(pid), time.process_time()
        deliveries_ms(*path, samples)
        broker = (_cpu_s(pid) - broker_before) * 1000 / samples
        client = (time.process_time() - client_before) * 1000 / samples
    return broker, client, idle


def _cpu_s(pid: int) -> float:
    """Seconds every thread of process `pid` has run (schedstat: nanoseconds on the CPU)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            total += int((task / "schedstat").read_text().split()[0])
    return total / 1e9


def wait_first_delivery(producer: Producer, topic: str, received: queue.SimpleQueue[float]) -> None:
    """Send until the consumer gets a message (it starts from the last offset, so messages sent
    before its queues are assigned are not delivered), then drain."""
    deadline = time.monotonic() + FIRST_DELIVERY_S
    while time.monotonic() < deadline:
        producer.send(Message(topic, b"warm-up"))
        try:
            received.get(timeout=0.2)
            break
        except queue.Empty:
            continue
    else:
        raise RuntimeError(f"the PushConsumer got nothing within {FIRST_DELIVERY_S:.0f} s")
    time.sleep(0.5)
    while not received.empty():
        received.get()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cpu", action="store_true",
                        help="CPU ms per delivery (broker, client) over the remoting port instead")
    args = parser.parse_args()
    env = Environment(Scale.quick())
    try:
        if args.cpu:
            for run in range(args.runs):
                _report_cpu(env.directory(f"cpu{run}"), f"run {run}", args.samples)
            return 0
        with env.redis() as redis_server:
            for run in range(args.runs):
                for over_grpc in (True, False):
                    path = "gRPC    " if over_grpc else "remoting"
                    with broker(env.directory(f"run{run}-{path.strip()}"), over_grpc) as server:
                        _report(f"run {run} {path}",
                                lambda: push_delivery_latencies_ms(server.address, args.samples))
                if redis_server is not None:
                    _report(f"run {run} XREAD   ", lambda: rr.xread_block_latencies(
                        redis_server, args.samples, b"x" * 100, SETTLE_S))
    finally:
        env.close()
    return 0


def _report_cpu(directory: Path, label: str, samples: int) -> None:
    with broker(directory) as server:
        load = os.getloadavg()[0]
        broker_ms, client_ms, idle_ms = cpu_per_delivery_ms(server, samples)
    print(f"{label} CPU per delivery: broker {broker_ms:.3f} ms (idle {idle_ms:.3f} ms per "
          f"{SETTLE_S * 1000:.0f} ms), client {client_ms:.3f} ms  (load {load:.1f})", flush=True)


def _report(label: str, measure: Callable[[], list[float]]) -> None:
    load = os.getloadavg()[0]
    latencies = measure()
    print(f"{label}: p50 {percentile(latencies, 0.5):.2f} ms  p99 {percentile(latencies, 0.99):.2f} ms"
          f"  (load {load:.1f} -> {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
