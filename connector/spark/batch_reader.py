"""`spark.read.format("rmq")`: every queue of the topics from `startingOffsets` (default
earliest) to `endingOffsets` (default latest; or endingOffsetsByTimestamp / endingTimestamp),
one partition per queue with messages (cut further by minPartitions).

A batch read commits nothing: only `startingOffsets=committed` (which needs option
consumerGroup) reads the group's OffsetStore; otherwise no group state is touched and the
pulls carry the read's own `spark-rmq-<uuid>` name."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from rmq.connector.backoff import retry_unavailable
from rmq.connector.broker_offsets import BrokerOffsetLookup
from rmq.connector.errors import RmqOptionError
from rmq.connector.offset_store import create_offset_store
from rmq.connector.offsets import resolve_offset
from rmq.connector.spark.options import OUTAGE_OPTION, SourceOptions
from rmq.connector.spark.partition_reader import QueueRangePartition, read_queue_range
from rmq.connector.spark.ranges import split_ranges
from rmq.connector.spark.start_offsets import check_named_queues, resolve_start
from rmq.connector.spark.topics import matching_topics


class RmqBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self._options = options

    def partitions(self) -> list[QueueRangePartition]:
        return retry_unavailable(self._plan, self._options.pull.outage_window_ms, "planning the read",
                                 OUTAGE_OPTION)

    def _plan(self) -> list[QueueRangePartition]:
        options = self._options
        with options.pull.connect() as client:
            store = create_offset_store(
                client, options.consumer_group, broadcasting=options.broadcasting,
                directory=options.offset_store_dir,
            ) if options.consumer_group else None
            lookup = BrokerOffsetLookup(client, store)
            topics = matching_topics(client, options) if options.topic_pattern else options.topics
            lookup.refresh(topics)
            known = lookup.known_queues()
            check_named_queues(options.starting_offsets, known, starting=True)
            check_named_queues(options.ending_offsets, known, starting=False)
            partitions = []
            for topic in topics:
                for mq in lookup.message_queues(topic):
                    start = resolve_start(options.starting_offsets, mq, lookup)
                    end = resolve_offset(options.ending_offsets, mq, lookup)
                    if end < start:
                        raise RmqOptionError(
                            f"endingOffsets {end} of {mq} is before its startingOffsets {start} "
                            f"({options.starting_offsets})"
                        )
                    if end > start:
                        partitions.append(QueueRangePartition(mq, start, end, options.pull))
        return split_ranges(partitions, options.min_partitions)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Spark plans one empty InputPartition(None) when partitions() returns none.
        if isinstance(partition, QueueRangePartition):
            yield from read_queue_range(partition)
