"""The streaming query the Spark scenarios run: rmq source -> parquet file sink with a
checkpoint, and reading its committed output back. Used in the test process (the session's
SparkSession) and by `spark_query_job.py` (a separate driver process that tests kill)."""

from __future__ import annotations

import json
import time
from typing import Any

from integration_tests.reliability.traffic import StoredMessage

OUTPUT_COLUMNS = ["queue_id", "queue_offset", "body"]


def start_query(spark: Any, endpoints: str, topic: str, group: str, checkpoint: str, output: str,
                trigger_seconds: float = 1.0, available_now: bool = False, **options: str) -> Any:
    """Start `topic` -> parquet at `output` (checkpoint at `checkpoint`) with a processing-time
    trigger, or Trigger.AvailableNow; `options` are extra source options (startingOffsets
    defaults to earliest)."""
    reader = (spark.readStream.format("rmq").option("endpoints", endpoints).option("topic", topic)
              .option("consumerGroup", group).option("startingOffsets", "earliest"))
    for name, value in options.items():
        reader = reader.option(name, value)
    trigger = {"availableNow": True} if available_now else {"processingTime": f"{trigger_seconds} seconds"}
    return (reader.load().select(*OUTPUT_COLUMNS).writeStream.format("parquet")
            .option("checkpointLocation", checkpoint).option("path", output)
            .trigger(**trigger).start())


def read_output(spark: Any, output: str) -> list[StoredMessage]:
    """The rows the file sink committed (Spark honours `_spark_metadata`, so files of a batch
    that never committed are not read)."""
    rows = spark.read.parquet(output).select(*OUTPUT_COLUMNS).collect()
    return [StoredMessage(row.queue_id, row.queue_offset, bytes(row.body)) for row in rows]


def committed_positions(query: Any, topic: str) -> dict[int, int]:
    """queue id -> next offset of the last micro-batch the query completed."""
    progress = query.lastProgress
    if not progress or not progress["sources"]:
        return {}
    end = progress["sources"][0]["endOffset"]
    end = json.loads(end) if isinstance(end, str) else end
    return {int(queue_id): offset for brokers in [end.get(topic, {})]
            for queues in brokers.values() for queue_id, offset in queues.items()}


def wait_until_caught_up(query: Any, topic: str, max_offsets: dict[int, int], timeout: float) -> None:
    """Wait until the query has completed a batch ending at `max_offsets` (queue id -> offset)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        if committed_positions(query, topic) == max_offsets:
            return
        time.sleep(0.5)
    reached = committed_positions(query, topic)
    raise AssertionError(f"query did not reach {max_offsets} in {timeout}s: at {reached}, {query.status}")
