"""`spark.read.format("rmq")`: every queue of the topics from `startingOffsets` (default
earliest) to `endingOffsets` (default latest), one partition per queue with messages.

A batch read commits nothing: only `startingOffsets=committed` (which needs option
consumerGroup) reads the group's OffsetStore; otherwise no group state is touched and the
pulls carry the read's own `spark-rmq-<uuid>` name."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from rmq.connector.backoff import retry_unavailable
from rmq.connector.broker_offsets import BrokerOffsetLookup
from rmq.connector.offset_store import create_offset_store
from rmq.connector.offsets import resolve_offset
from rmq.connector.spark.options import RmqOptionError, SourceOptions
from rmq.connector.spark.partition_reader import QueueRangePartition, read_queue_range


class RmqBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self._options = options

    def partitions(self) -> list[QueueRangePartition]:
        return retry_unavailable(self._plan, self._options.pull.pull_timeout_ms, "planning the read")

    def _plan(self) -> list[QueueRangePartition]:
        options = self._options
        with options.pull.connect() as client:
            store = create_offset_store(
                client, options.consumer_group, broadcasting=options.broadcasting,
                directory=options.offset_store_dir,
            ) if options.consumer_group else None
            lookup = BrokerOffsetLookup(client, store)
            lookup.refresh(options.topics)
            partitions = []
            for topic in options.topics:
                for mq in lookup.message_queues(topic):
                    start = resolve_offset(options.starting_offsets, mq, lookup)
                    end = resolve_offset(options.ending_offsets, mq, lookup)
                    if end < start:
                        raise RmqOptionError(
                            f"endingOffsets {end} of {mq} is before its startingOffsets {start} "
                            f"({options.starting_offsets})"
                        )
                    if end > start:
                        partitions.append(QueueRangePartition(mq, start, end, options.pull))
        return partitions

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Spark plans one empty InputPartition(None) when partitions() returns none.
        if isinstance(partition, QueueRangePartition):
            yield from read_queue_range(partition)
