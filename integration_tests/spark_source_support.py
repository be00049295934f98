"""Helpers for the `rmq` source tests: producing into a real broker and driving the
stream/batch readers the way Spark does (initialOffset → latestOffset → partitions →
read on "executors" → commit)."""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path

import pyarrow as pa
from pyspark.sql.streaming.datasource import ReadAllAvailable

from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.spark.options import parse_source_options
from rmq.connector.spark.source_offsets import StreamOffset
from rmq.connector.spark.source_schema import ALL_COLUMNS
from rmq.connector.spark.stream_reader import RmqStreamReader

# The columns of a query naming three (its schema "queue_id int, queue_offset long, body binary"):
# the source's tests run with these as well as with every column (fixture `columns`).
NARROW_COLUMNS = ("queue_id", "queue_offset", "body")

RETENTION_CONFIG = {   # tiny files, kept about a second, cleaned at once (store §11)
    "store": {
        "mapped_file_size_commit_log": 4096, "mapped_file_size_consume_queue": 400,
        "file_reserved_time_hours": 0.0003, "delete_when": "now", "clean_resource_interval_ms": 200,
        "message_index_enable": False,
    }
}


def retention_config(tmp_path: Path) -> list[str]:
    path = tmp_path / "retention.json"
    path.write_text(json.dumps(RETENTION_CONFIG))
    return ["--config", str(path)]


def retained_min_offset(client: RmqClient, mq: MessageQueue, timeout: float = 30.0) -> int:
    """The queue's min offset once retention has deleted files and stopped (unchanged for a
    second): every file but the newest is older than the reserved time."""
    deadline = time.monotonic() + timeout
    seen, since = 0, time.monotonic()
    while True:
        low = client.topic_offsets(mq.topic)[mq].min_offset
        if low != seen:
            seen, since = low, time.monotonic()
        elif low > 0 and time.monotonic() - since >= 1.0:
            return low
        assert time.monotonic() < deadline, f"retention did not settle on {mq} (min offset {low})"
        time.sleep(0.1)


def produce(client: RmqClient, topic: str, count: int, *, tags: str = "", prefix: str = "m",
            start: int = 0) -> list[bytes]:
    """Send `count` messages round-robin over the queues; returns their bodies."""
    bodies = [f"{prefix}-{i}".encode() for i in range(start, start + count)]
    client.send(topic, [OutgoingMessage(body, tags=tags) for body in bodies])
    return bodies


def wait_dispatched(client: RmqClient, topic: str, total: int,
                    timeout: float = 10.0) -> dict[MessageQueue, int]:
    """Max offsets once `total` messages are visible in the ConsumeQueues (dispatch is async)."""
    deadline = time.monotonic() + timeout
    while True:
        offsets = {mq: o.max_offset for mq, o in client.topic_offsets(topic).items()}
        if sum(offsets.values()) >= total or time.monotonic() > deadline:
            assert sum(offsets.values()) == total, offsets
            return offsets
        time.sleep(0.05)


def stream_reader(endpoints: str, topic: str | None, columns: tuple[str, ...] = ALL_COLUMNS,
                  **options: str) -> RmqStreamReader:
    """A stream reader as `load()` creates it (topic None: give option topicPattern), for a query of
    `columns` (its schema)."""
    topics = {} if topic is None else {"topic": topic}
    options = {"endpoints": endpoints, **topics, **options}
    return RmqStreamReader(parse_source_options(options, streaming=True, columns=columns))


def first_offset(reader: RmqStreamReader) -> dict:
    """Where a query starts reading, as an offset a micro-batch can start from: the offsets
    startingOffsets designates, which the end of the query's first micro-batch records
    (`"@from"`; that batch goes from the initial offset, identity only, to what the limit admits)."""
    first_end = StreamOffset.from_json(reader.latestOffset(reader.initialOffset(), ReadAllAvailable()))
    assert first_end.start is not None
    return StreamOffset(first_end.client_id, first_end.group, first_end.start).to_json()


def read_batch(reader, start: dict, end: dict) -> pa.Table:
    """Plan and read one micro-batch like Spark: partitions on the driver, then `read` on a
    pickled copy of the reader (what executors get)."""
    executor = pickle.loads(pickle.dumps(reader))
    partitions = pickle.loads(pickle.dumps(reader.partitions(start, end)))
    batches = [batch for partition in partitions for batch in executor.read(partition)]
    return pa.Table.from_batches(batches) if batches else pa.table({"body": pa.array([], pa.binary())})


def positions(offset: dict) -> dict[str, int]:
    """`{"topic:broker:queue": offset}` of a stream offset, without the client id."""
    return {f"{topic}:{broker}:{queue}": value
            for topic, brokers in offset.items() if not topic.startswith("@")
            for broker, queues in brokers.items() for queue, value in queues.items()}
