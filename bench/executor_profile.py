"""The executor's per-row path of row 5 outside Spark, for profiling (bench/NOTES.md, issue 43): a
broker process holding ROWS × 100 B in 8 queues (ASYNC flush, as row 5's: a SYNC broker's
group-commit loop adds ~1 % of a core); this process reads every queue's range as Spark's
Python worker does — `read_queue_range` (Flight receive or pulls, trimming, the tag re-check,
batch assembly), then pyspark's own steps between a data source's `read()` and the JVM
(`records_to_arrow_batches`, mapInArrow's `wrap_struct`, the Arrow stream serializer) into a null
sink — and prints the CPU seconds per row of this process and of the broker, per transport and
schema.

    .venv/bin/python -m bench.executor_profile [--rows N] [--columns all|3] [--transport flight|grpc]
                                                [--cprofile FILE]

Run it under `py-spy record -o out.svg -- .venv/bin/python -m bench.executor_profile ...` for a
sampled profile, or with --cprofile for call counts (pstats file).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql.conversion import ArrowBatchTransformer
from pyspark.sql.pandas.serializers import ArrowStreamSerializer
from pyspark.sql.types import StructType
from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

from bench import machine
from bench.environment import FLUSH
from bench.workload import body_of, produce
from rmq.connector.client import RmqClient
from rmq.connector.spark.data_source import RmqDataSource
from rmq.connector.spark.options import parse_source_options
from rmq.connector.spark.partition_reader import QueueRangePartition, read_queue_range
from rmq.connector.spark.source_schema import SOURCE_SCHEMA
from testing import processes

QUEUES = 8
TOPIC = "profile"
NARROW = ("queue_id", "queue_offset", "body")
READY_TIMEOUT_S = 180.0   # the broker's start on a machine other runs load (it measures CPU time, not wall)
MAX_ARROW_BATCH = 10_000   # spark.sql.execution.arrow.maxRecordsPerBatch's default


class _Null(io.RawIOBase):
    """Where the serializer writes what would go to the JVM."""

    def writable(self) -> bool:
        return True

    def write(self, data: object) -> int:
        return len(memoryview(data))  # type: ignore[arg-type]


def _worker_path(partition: QueueRangePartition, schema: StructType) -> Iterator[pa.RecordBatch]:
    """What Spark's Python worker sends on for one partition (plan_data_source_read, worker.py)."""
    batches = records_to_arrow_batches(read_queue_range(partition), MAX_ARROW_BATCH, schema,
                                       RmqDataSource({}))
    return map(ArrowBatchTransformer.wrap_struct, batches)


def read_all(partitions: list[QueueRangePartition], schema: StructType) -> int:
    rows = 0
    sink = _Null()
    serializer = ArrowStreamSerializer()
    for partition in partitions:
        batches = list(_worker_path(partition, schema))
        rows += sum(batch.num_rows for batch in batches)
        serializer.dump_stream(iter(batches), sink)
    return rows


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.executor_profile")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--columns", choices=("all", "3"), default="all")
    parser.add_argument("--transport", choices=("flight", "grpc"), default="flight")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cprofile", type=Path)
    return parser.parse_args(argv)


def _partitions(address: str, args: argparse.Namespace, columns: tuple[str, ...]
                ) -> list[QueueRangePartition]:
    """The topic filled with `args.rows` messages of 100 B, one partition per queue."""
    with RmqClient(address) as client:
        client.create_topic(TOPIC, queues=QUEUES)
        produce(client, TOPIC, args.rows, body_of(100), 1024)
        offsets = client.topic_offsets(TOPIC)
    options = {"endpoints": address, "topic": TOPIC, "transport": args.transport}
    pull = parse_source_options(options, streaming=False, columns=columns).pull
    return [QueueRangePartition(mq, o.min_offset, o.max_offset, pull) for mq, o in offsets.items()]


def _measure(broker_pid: int, partitions: list[QueueRangePartition], schema: StructType, label: str,
             profiler: cProfile.Profile | None) -> None:
    broker_before, mine_before = machine.process_cpu_seconds(broker_pid), time.process_time()
    if profiler is not None:
        profiler.enable()
    rows = read_all(partitions, schema)
    if profiler is not None:
        profiler.disable()
    mine = time.process_time() - mine_before
    theirs = machine.process_cpu_seconds(broker_pid) - broker_before
    print(f"{label}: {rows:,} rows, executor {mine / rows * 1e6:.3f} µs/row, broker "
          f"{theirs / rows * 1e6:.3f} µs/row", flush=True)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    columns = tuple(SOURCE_SCHEMA.names) if args.columns == "all" else NARROW
    schema = StructType([SOURCE_SCHEMA[name] for name in columns])
    profiler = cProfile.Profile() if args.cprofile else None
    with tempfile.TemporaryDirectory() as scratch:
        broker = processes.broker(Path(scratch), flush=FLUSH)   # as row 5's broker (bench.environment)
        broker.ready_timeout = READY_TIMEOUT_S
        broker.start()
        try:
            assert broker.process is not None
            partitions = _partitions(broker.address, args, columns)
            read_all(partitions, schema)   # warm: connections, imports, page cache
            for _ in range(args.repeats):
                _measure(broker.process.pid, partitions, schema, f"{args.transport}, {args.columns} columns",
                         profiler)
        finally:
            broker.stop()
    if profiler is not None:
        profiler.dump_stats(args.cprofile)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
