"""Row 13: the Arrow Flight data plane (docs/data-plane.md) without Spark. A topic of 8 queues
pre-filled with 100-byte messages (row 5's workload) is read whole, queue after queue, by a
fresh reader per run: through Flight (FlightReader, source-schema batches as they arrive) and
through PullMessage (pulls of 4,096 decoded with message_decoder.decode, what the partition
reader does); CPU per row of the broker process and of this reader. Then the same Flight read
while a second client produces 100-byte messages in batches of 1,024 (the broker's event
loop and Flight's threads share one GIL): both rates against each alone."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from bench import machine
from bench.environment import Environment
from bench.harness import Row, Stats
from bench.workload import GROUP, body_of, produce, pull_range
from rmq.connector.client import MessageQueue, RmqClient
from rmq.connector.flight_reader import FlightReader
from rmq.connector.spark.options import DEFAULT_PULL_BATCH_SIZE

QUEUES = 8
FILL_BATCH = 1024
TOPIC = "bench-flight"


def flight_rows(env: Environment) -> list[Row]:
    count = env.scale.e2e_messages
    with env.broker() as broker, RmqClient(broker.address) as client:
        client.create_topic(TOPIC, queues=QUEUES)
        produce(client, TOPIC, count, body_of(100), FILL_BATCH)
        ranges = {mq: o.max_offset for mq, o in client.topic_offsets(TOPIC).items()}
        pid = broker.process.pid
        runs = {"flight": _Runs(), "pull": _Runs()}
        for _ in range(env.scale.repeats):
            runs["flight"].measure(pid, count, lambda: _flight_read(client, ranges))
            runs["pull"].measure(pid, count, lambda: _pull_read(client, ranges))
        produced_alone, read_while, produced_while = _concurrent(env, client, ranges, count)
    name = f"{QUEUES} queues, {count:,} msgs of 100 B, fresh reader per run"
    return [
        Row(f"Flight read ({name})", "rows/s", Stats.of(runs["flight"].rates),
            "PullMessage + decode, same store and bytes", Stats.of(runs["pull"].rates)),
        Row("broker + reader CPU per row, Flight", "µs", Stats.of(runs["flight"].cpu_us),
            "PullMessage + decode", Stats.of(runs["pull"].cpu_us)),
        Row("Flight read while producing", "rows/s", read_while, "Flight read alone",
            Stats.of(runs["flight"].rates)),
        Row("produce while a Flight read runs", "msgs/s", produced_while, "produce alone", produced_alone),
    ]


class _Runs:
    def __init__(self) -> None:
        self.rates: list[float] = []
        self.cpu_us: list[float] = []

    def measure(self, broker_pid: int, count: int, read: Callable[[], int]) -> None:
        broker_before, reader_before = machine.process_cpu_seconds(broker_pid), time.process_time()
        start = time.perf_counter()
        rows = read()
        elapsed = time.perf_counter() - start
        if rows != count:
            raise RuntimeError(f"read {rows} rows, expected {count}")
        self.rates.append(rows / elapsed)
        cpu = machine.process_cpu_seconds(broker_pid) - broker_before + time.process_time() - reader_before
        self.cpu_us.append(cpu / rows * 1e6)


def _flight_read(client: RmqClient, ranges: dict[MessageQueue, int]) -> int:
    rows = 0
    with FlightReader(client) as reader:
        for mq, end in ranges.items():
            offset = 0
            while offset < end:
                for chunk in reader.read(mq, offset, end, group=GROUP, batch_rows=DEFAULT_PULL_BATCH_SIZE):
                    rows += chunk.batch.num_rows
                    offset = chunk.result.next_begin_offset
    return rows


def _pull_read(client: RmqClient, ranges: dict[MessageQueue, int]) -> int:
    for mq, end in ranges.items():
        pull_range(client, mq, 0, end, True, DEFAULT_PULL_BATCH_SIZE)
    return sum(ranges.values())


def _concurrent(env: Environment, client: RmqClient, ranges: dict[MessageQueue, int], count: int
                ) -> tuple[Stats, Stats, Stats]:
    """(produce alone, Flight read while producing, produce while reading), msgs/s. A quarter of
    the read's rows are produced: at ~200K msgs/s against ~800K rows/s read while producing, the
    two last about as long, so each runs beside the other throughout (half of them, before the
    fourth stop, kept producing for as long again after the read had ended)."""
    to_produce = count // 4
    alone, read_while, produced_while = [], [], []
    with RmqClient(client.endpoints) as producer:
        producer.create_topic(f"{TOPIC}-in", queues=QUEUES)
        for _ in range(env.scale.repeats):
            start = time.perf_counter()
            produce(producer, f"{TOPIC}-in", to_produce, body_of(100), FILL_BATCH)
            alone.append(to_produce / (time.perf_counter() - start))
            def produce_now() -> None:
                began = time.perf_counter()
                produce(producer, f"{TOPIC}-in", to_produce, body_of(100), FILL_BATCH)
                produced_while.append(to_produce / (time.perf_counter() - began))

            thread = threading.Thread(target=produce_now)
            start = time.perf_counter()
            thread.start()
            rows = _flight_read(client, ranges)
            read_while.append(rows / (time.perf_counter() - start))
            thread.join()
    return Stats.of(alone), Stats.of(read_while), Stats.of(produced_while)
