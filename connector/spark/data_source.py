"""The Spark data source `rmq`.

Register it once per session, then read or write (docs/manual/spark.md lists the options):

    from rmq.connector import register
    register(spark)     # = spark.dataSource.register(RmqDataSource)
    spark.readStream.format("rmq").option("endpoints", "127.0.0.1:9876").option("topic", "t").load()

Source options (names case-insensitive; docs/manual/spark.md has the full
contract):

    endpoints              required: name server(s) or broker(s), host:port[,host:port]
    topic | topicPattern   required: a topic or a comma-separated list | a regex (topics
                           created later are picked up at the next micro-batch)
    consumerGroup          the group for membership, allocation and committed offsets; queries
                           with the same group share the queues. Default: a new group per query,
                           spark-rmq-<uuid>, kept in the checkpoint (a restart keeps it); a batch
                           read without it touches no group state
    subExpression          * | TagA || TagB
    sqlFilter              an SQL92 condition on properties, filtered on the broker (instead of subExpression)
    startingOffsets        stream: latest, batch: earliest; or committed (needs consumerGroup),
                           timestamp:<epoch-ms>, JSON {"topic":{"broker":{"queueId":offset}}}
                           (-2 earliest, -1 latest; queues left out use the default). A stream
                           applies it at its first start only: queues it owns later (handed
                           over, or added to the topic) start at the group's committed offset,
                           else at their earliest
    startingOffsetsByTimestamp   JSON {"topic":{"broker":{"queueId":epochMs}}}
    committedFallback      latest (default) | earliest | timestamp:<ms> | error
    endingOffsets          batch only: latest (default) or JSON (-1 latest)
    endingOffsetsByTimestamp, endingTimestamp   batch only: ends by timestamp
    maxMessagesPerTrigger  stream only: at most this many messages per micro-batch
    minMessagesPerTrigger, maxTriggerDelay   stream only: wait for N messages, at most the delay (15m)
    minPartitions          at least this many tasks (queue ranges cut into contiguous pieces)
    maxRecordsPerPartition at most this many offsets per task (longer ranges cut into equal pieces)
    maxBytesPerTrigger     stream only: about this many stored bytes per micro-batch (with the rows limit)
    startingOffsetsByTimestampStrategy   latest (default) | error: a queue without a message at or
                           after its starting timestamp starts at its end, or fails the query
    pullBatchSize          messages per PullMessage, 1..32768, default 4096
    pullTimeoutMs          timeout of one request, default 3000
    brokerOutageWindowMs   retrying an unreachable broker (driver and executors), default 120000
    allocateStrategy       avg (default) | circle
    messageModel           clustering (default) | broadcasting
    failOnDataLoss         true (default) | false
    offsetStoreDir         broadcasting offsets: <dir>/<group>/offsets.json, default ~/.rmq/offsets
    accessKey, secretKey, tls, tlsCaFile, tlsCertFile, tlsKeyFile   signed / TLS / mutual TLS calls

A query may name its columns: `.schema("queue_id int, queue_offset long, body binary")` reads only
those (source_schema.source_columns checks them; Spark then runs no Python at `load()`, so the
check and the options' come when the reader is created, at the query's start).

Options are validated at `load()`. Spark does not say there whether `read` or `readStream`
asked, so the checks that depend on it (endingOffsets on a stream, ...) run when the reader
is created; a stream reader that fails them is a RefusedStreamReader, which fails the query
at its first call. A wrong value fails with a message naming the option and its accepted
values.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from rmq.connector.errors import RmqOptionError
from rmq.connector.spark.options import check_source_options, parse_source_options
from rmq.connector.spark.source_schema import SOURCE_SCHEMA, source_columns
from rmq.connector.spark.stream_reader import OffsetJson, RmqStreamReader

if TYPE_CHECKING:
    from rmq.connector.spark.batch_reader import RmqBatchReader
    from rmq.connector.spark.writer import RmqDataSourceArrowWriter, RmqDataSourceStreamArrowWriter


class RmqDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rmq"

    def schema(self) -> StructType:
        # Called at `load()` of reads without a schema of their own (writes never ask for it): fail
        # early on bad options. With `.schema(...)` Spark runs no Python at load(): the options and
        # the columns are checked when the reader is created, at the query's start.
        check_source_options(self.options)
        return SOURCE_SCHEMA

    # Each query's planning runs in a Python process of its own, which loads this module: the
    # batch reader and the writers are imported by the methods that need them, so a streaming
    # read does not pay for them at every start (bench/NOTES.md, issue 28 fourth pass).

    def reader(self, schema: StructType) -> RmqBatchReader:
        from rmq.connector.spark.batch_reader import RmqBatchReader, RmqFilteringBatchReader
        options = parse_source_options(self.options, streaming=False, columns=source_columns(schema))
        return RmqFilteringBatchReader(options) if _asked_by_pushdown() else RmqBatchReader(options)

    def streamReader(self, schema: StructType) -> RmqStreamReader | RefusedStreamReader:
        try:
            return RmqStreamReader(parse_source_options(self.options, streaming=True,
                                                        columns=source_columns(schema)))
        except RmqOptionError as error:
            return RefusedStreamReader(error)

    def writer(self, schema: StructType, overwrite: bool) -> RmqDataSourceArrowWriter:
        from rmq.connector.spark.writer import RmqDataSourceArrowWriter
        return RmqDataSourceArrowWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> RmqDataSourceStreamArrowWriter:
        from rmq.connector.spark.writer import RmqDataSourceStreamArrowWriter
        return RmqDataSourceStreamArrowWriter(self.options, schema, overwrite)


class RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The reader of a stream whose options are wrong for streams only (e.g. endingOffsets).

    Spark calls `schema()` at `load()` without saying whether `read` or `readStream` asked,
    so such options are refused when the query starts: the first call fails with the
    option's message. (An exception from `streamReader()` itself would reach the user as
    PySpark's own `UnboundLocalError`.)"""

    def __init__(self, error: RmqOptionError) -> None:
        self.error = error.with_traceback(None)   # the user sees the message, not where it was found

    def initialOffset(self) -> OffsetJson:
        raise self.error

    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    def latestOffset(self, start: OffsetJson, limit: ReadLimit) -> OffsetJson:
        raise self.error

    def getDefaultReadLimit(self) -> ReadLimit:
        raise self.error

    def partitions(self, start: OffsetJson, end: OffsetJson) -> list[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        raise self.error


PUSHDOWN_WORKER_FILE = "data_source_pushdown_filters.py"   # pyspark.sql.worker's pushdown step


def _asked_by_pushdown() -> bool:
    """Whether Spark's filter-pushdown step asks for the reader. Spark runs that step only
    with spark.sql.python.filterPushdown.enabled, and otherwise refuses a reader that has a
    pushFilters method; the source cannot read that setting, so it looks at its caller."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if Path(frame.f_code.co_filename).name == PUSHDOWN_WORKER_FILE:
            return True
        frame = frame.f_back
    return False


def register(spark: SparkSession) -> None:
    """Make `format("rmq")` available in `spark`."""
    spark.dataSource.register(RmqDataSource)
