"""`spark.read.format("rmq")`: every queue of the topics from `startingOffsets` (default
earliest) to `endingOffsets` (default latest; or endingOffsetsByTimestamp / endingTimestamp),
one partition per queue with messages (cut further by minPartitions).

A batch read commits nothing: only `startingOffsets=committed` (which needs option
consumerGroup) reads the group's OffsetStore; otherwise no group state is touched and the
pulls carry the read's own `spark-rmq-<uuid>` name."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from rmq.connector.errors import RmqOptionError, RmqUnavailable
from rmq.connector.offset_store import create_offset_store
from rmq.connector.spark.backoff import retry_unavailable
from rmq.connector.spark.broker_offsets import BrokerOffsetLookup
from rmq.connector.spark.options import OUTAGE_OPTION, PullSettings, SourceOptions
from rmq.connector.spark.pushdown import Narrowing
from rmq.connector.spark.ranges import QueueRangePartition, split_ranges
from rmq.connector.spark.start_offsets import check_named_queues, resolve_end, resolve_start
from rmq.connector.spark.topics import matching_topics
from rmq.message_queue import MessageQueue


class RmqBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._narrowing = Narrowing()   # filters pushed by Spark (RmqFilteringBatchReader)

    def partitions(self) -> list[QueueRangePartition]:
        _check_endpoints_answer(self._options.pull)
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
            queues = [mq for topic in topics for mq in lookup.message_queues(topic)]
            known = set(queues)
            check_named_queues(options.starting_offsets, known, starting=True)
            check_named_queues(options.ending_offsets, known, starting=False)
            lookup.refresh(topics, brokers=self._narrowing.brokers())   # pushed broker_name: only those
            pull = self._narrowing.pull_settings(options.pull)
            partitions = []
            for mq in queues:
                if pull is None or not self._narrowing.allows(mq):
                    continue
                start = resolve_start(options.starting_offsets, mq, lookup)
                end = resolve_end(options.ending_offsets, mq, lookup)
                if end < start:
                    raise RmqOptionError(
                        f"endingOffsets {end} of {mq} is before its startingOffsets {start} "
                        f"({options.starting_offsets})"
                    )
                start, end = self._narrow(mq, start, end, lookup)
                if end > start:
                    partitions.append(QueueRangePartition(mq, start, end, pull))
        return split_ranges(partitions, options.min_partitions, options.max_records_per_partition)

    def _narrow(self, mq: MessageQueue, start: int, end: int, lookup: BrokerOffsetLookup) -> tuple[int, int]:
        """The range cut to the pushed queue_offset and store_timestamp bounds."""
        narrowing = self._narrowing
        if narrowing.time_low_ms is not None and start < end:
            start = max(start, lookup.search_offset(mq, narrowing.time_low_ms))
        if narrowing.time_high_ms is not None and start < end:
            end = min(end, lookup.search_offset(mq, narrowing.time_high_ms))
        return narrowing.clamp(start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        # Spark plans one empty InputPartition(None) when partitions() returns none.
        if isinstance(partition, QueueRangePartition):
            # executors only, as the stream reader's read()
            from rmq.connector.spark.partition_reader import read_queue_range

            yield from read_queue_range(partition)


def _check_endpoints_answer(pull: PullSettings) -> None:
    """A batch read's first contact: when no endpoint answers at all (a wrong address or port),
    fail within pullTimeoutMs naming them, rather than retrying for the outage window, which is
    for brokers that answered before and went away."""
    with pull.connect(timeout=pull.pull_timeout_ms / 1000) as client:
        try:
            client.list_brokers()
        except RmqUnavailable as error:
            raise RmqOptionError(
                f"Option 'endpoints': nothing answers at {pull.endpoints} (within pullTimeoutMs, "
                f"{pull.pull_timeout_ms} ms): {error.message}") from None


class RmqFilteringBatchReader(RmqBatchReader):
    """The batch reader with filter pushdown: Spark uses it only when
    `spark.sql.python.filterPushdown.enabled` is true (with the setting off, Spark refuses any
    reader that implements pushFilters, so the plain reader is used then)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self._narrowing.push(filters)
        return filters   # Spark re-checks every row: a pushed filter only narrows the pulls
