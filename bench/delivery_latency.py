"""Row 4's end-to-end path (issue 29 item 1): Producer.send started → the PushConsumer's
listener called, one 100-byte message every SETTLE_S, both at their default options, in one
process (one clock). The broker serves its remoting port (by default), which the SDK then uses for
the send and the consumer's held pulls (docs/client-behaviour.md "Transport"); `over_grpc` names a
broker started with `--remoting-listen off`, the gRPC path.

`python -m bench.delivery_latency --samples 200 --runs 3` alternates the two brokers and Redis
XREAD BLOCK's wake, printing each run's p50/p99 and the load average (bench/NOTES.md)."""

from __future__ import annotations

import argparse
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
        latencies = []
        for index in range(WARMUP + samples):
            time.sleep(settle_s)
            sent = time.perf_counter()
            producer.send(Message(topic, b"x" * 100))
            delivered = received.get(timeout=30)
            if index >= WARMUP:
                latencies.append((delivered - sent) * 1000.0)
        return latencies
    finally:
        producer.shutdown()
        consumer.shutdown()


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
    args = parser.parse_args()
    env = Environment(Scale.quick())
    try:
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


def _report(label: str, measure: Callable[[], list[float]]) -> None:
    load = os.getloadavg()[0]
    latencies = measure()
    print(f"{label}: p50 {percentile(latencies, 0.5):.2f} ms  p99 {percentile(latencies, 0.99):.2f} ms"
          f"  (load {load:.1f} -> {os.getloadavg()[0]:.1f})", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
