"""Executor side of the source: read one MessageQueue's offset range [start, end) as Arrow.

Pulls `pullBatchSize` messages at a time (no long polling: the range is known to exist),
decodes the packed pulls column-wise and yields them while the next pull is in flight:
consecutive pulls are held and decoded together as long as one more pull of the last one's
size would stay within BATCH_ROWS rows and BATCH_BYTES of records, so less than BATCH_BYTES
plus one pull, and the pull in flight, are held in memory (a pull above BATCH_BYTES / 2 is
decoded on its own, as each was before). Rows at or past `end` are trimmed (a filtered pull
may scan beyond it) and tags are re-checked on the client (the broker
filters by tag hash code only, spec pull §10.3); filtered-out messages advance the offset
without producing rows.

With option `transport` (docs/data-plane.md) the range is read through the broker's Arrow Flight
data plane instead (by default where the route advertises one): the same store reads, as
source-schema batches carrying each read's outcome, handled exactly as the pulls' below.

Each pull waits at most `pullTimeoutMs`. Transient failures (broker unreachable, a message
being moved) are retried with exponential backoff for up to `brokerOutageWindowMs`, one log
line per round naming the broker, then the task fails naming broker, queue and offset.
Offsets the broker no longer holds (retention) fail the task, or with `failOnDataLoss=false`
are skipped with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmq.connector.client import PullResult
from rmq.connector.errors import RmqDataLossError, RmqReadError, RmqUnavailable
from rmq.connector.flight_reader import FlightReader
from rmq.connector.spark.backoff import Backoff, log_retry
from rmq.connector.spark.client_manager import EXECUTOR_CLIENTS, Connection, ConnectionKey
from rmq.connector.spark.message_decoder import decode_pulls, filter_tags
from rmq.connector.spark.options import OUTAGE_OPTION
from rmq.connector.spark.ranges import QueueRangePartition
from rmq.connector.transport import reads_through_flight
from rmq.statuses import GetMessageStatus, PullStatus
from rmq.v1 import rmq_pb2

logger = logging.getLogger(__name__)
T = TypeVar("T")
Item = TypeVar("Item")

def _joined(batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Consecutive batches as one (none when there are none)."""
    if batches:
        yield batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def read_queue_range(partition: QueueRangePartition) -> Iterator[pa.RecordBatch]:
    """The range's rows, read with this process's shared connection for the partition's options."""
    pull = partition.pull
    key = ConnectionKey.of(pull.endpoints, pull.pull_timeout_ms / 1000, pull.security)
    with EXECUTOR_CLIENTS.lease(key) as connection:
        yield from QueueRangeReader(connection, partition).batches()


# Pulls are decoded together while one more would keep them within these: pulls of 100-byte
# messages (4,096 at the default pullBatchSize) four at a time, pulls of 1 KiB messages one
# at a time as before (the executor's peak memory stays that of one pull).
BATCH_ROWS = 16_384
BATCH_BYTES = 4 << 20


class _Held(Generic[Item]):
    """Consecutive reads (pulls, or Flight batches) waiting to be handed on as one batch."""

    def __init__(self) -> None:
        self._items: list[Item] = []
        self._rows = self._bytes = 0

    def add(self, item: Item, rows: int, size: int) -> list[Item]:
        """Hold `item` of `rows` rows and `size` bytes; release the held ones (to decode or
        yield now) when one more of this size would pass BATCH_ROWS or BATCH_BYTES."""
        self._items.append(item)
        self._rows += rows
        self._bytes += size
        if self._rows + rows > BATCH_ROWS or self._bytes + size > BATCH_BYTES:
            return self.release()
        return []

    def release(self) -> list[Item]:
        items, self._items = self._items, []
        self._rows = self._bytes = 0
        return items


def _hold_pull(held: _Held[rmq_pb2.PackedMessages], messages: rmq_pb2.PackedMessages
               ) -> list[rmq_pb2.PackedMessages]:
    size = int(np.frombuffer(messages.sizes, dtype="<i4").sum())   # its records' bytes, uncopied
    return held.add(messages, messages.count, size)


class QueueRangeReader:
    def __init__(self, connection: Connection, partition: QueueRangePartition) -> None:
        self._client = connection.client
        self._flight = connection.flight
        self._mq = partition.mq
        self._start = partition.start_offset
        self._end = partition.end_offset
        self._settings = partition.pull

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The rows of the range in queue order, through Flight or PullMessage (option transport)."""
        if self._start >= self._end:
            return
        if self._reads_through_flight(self._flight):
            yield from self._flight_batches(self._flight)
        else:
            yield from self._pulled_batches()

    def _reads_through_flight(self, flight: FlightReader) -> bool:
        return self._retrying(self._start, lambda: reads_through_flight(
            self._settings.transport, lambda: flight.available(self._mq), self._mq.broker_name),
            "finding its data plane")

    def _flight_batches(self, flight: FlightReader) -> Iterator[pa.RecordBatch]:
        """One ticket after the other from where the last one ended; a stream cut by an outage is
        asked for again from the last offset it delivered, within the outage window. The broker's
        store reads are as large as a batch handed to Spark (BATCH_ROWS, BATCH_BYTES; at least
        pullBatchSize rows): the stream's batches go on as they come, without being copied into
        larger ones, and the broker builds a quarter as many (bench/NOTES.md, issue 43)."""
        settings = self._settings
        offset, backoff = self._start, Backoff(settings.outage_window_ms / 1000)
        held: _Held[pa.RecordBatch] = _Held()   # small batches go to Spark together, as pulls do
        while offset < self._end:
            try:
                for chunk in flight.read(self._mq, offset, self._end, group=settings.consumer_group,
                                         batch_rows=max(settings.pull_batch_size, BATCH_ROWS),
                                         batch_bytes=BATCH_BYTES, sub_expression=settings.selector,
                                         timeout=settings.pull_timeout_ms / 1000,
                                         columns=settings.read_columns):
                    problem = self._transient_problem(offset, chunk.result)
                    if problem is not None:
                        raise RmqUnavailable(problem, broker=self._mq.broker_name)
                    offset = self._next_offset(offset, chunk.result)
                    for batch in self._trimmed(chunk.batch):
                        yield from _joined(held.add(batch, batch.num_rows, batch.nbytes))
                    backoff = Backoff(settings.outage_window_ms / 1000)
            except RmqUnavailable as error:
                self._retry_or_fail(backoff, offset, f"broker unavailable: {error.message}")
        yield from _joined(held.release())

    def _pulled_batches(self) -> Iterator[pa.RecordBatch]:
        """The rows of the range in pull order. The next pull runs on a background thread
        while this one is decoded and consumed (by Spark's Python worker), so the broker and
        the reader work at the same time; at most one request is outstanding. Consecutive
        small pulls are decoded together into one batch (_Held): fewer, larger batches
        cost Spark and the decoder less per row."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rmq-prefetch") as prefetch:
            pending: Future[tuple[PullResult | None, int]] | None = prefetch.submit(self._step, self._start)
            held: _Held[rmq_pb2.PackedMessages] = _Held()
            while pending is not None:
                found, offset = pending.result()
                pending = prefetch.submit(self._step, offset) if offset < self._end else None
                if found is not None:
                    yield from self._rows(_hold_pull(held, found.messages))
            yield from self._rows(held.release())

    def _step(self, offset: int) -> tuple[PullResult | None, int]:
        """Pull at `offset`: the result if it FOUND messages, and the offset to pull next."""
        result = self._pull(offset)
        return (result if result.pull_status == PullStatus.FOUND else None), self._next_offset(offset, result)

    def _next_offset(self, offset: int, result: PullResult) -> int:
        """Where to read after a read at `offset` answered `result` (lost offsets reported)."""
        if result.pull_status == PullStatus.FOUND:
            return self._advance(offset, result.next_begin_offset)
        if result.pull_status == PullStatus.NO_MATCHED_MSG:
            resume = self._advance(offset, result.next_begin_offset)
            if result.store_status == GetMessageStatus.MESSAGE_WAS_REMOVING:
                # the entries' CommitLog file is being deleted: data loss, not a tag-filter miss
                self._report_gap(offset, resume, result, "their CommitLog file was deleted by retention")
            return resume
        # OFFSET_ILLEGAL, or NO_NEW_MSG below the planned end: the data is gone
        return self._skip_lost(offset, result)

    def _pull(self, offset: int) -> PullResult:
        """One pull, retried while the broker is unreachable or the outcome is transient."""
        settings = self._settings
        backoff = Backoff(settings.outage_window_ms / 1000)
        while True:
            try:
                result = self._client.pull(
                    self._mq, offset, min(settings.pull_batch_size, self._end - offset),
                    group=settings.consumer_group, sub_expression=settings.selector,
                    timeout=settings.pull_timeout_ms / 1000,
                )
                problem = self._transient_problem(offset, result)
            except RmqUnavailable as error:
                problem = f"broker unavailable: {error.message}"
            if problem is None:
                return result
            self._retry_or_fail(backoff, offset, problem)

    def _retrying(self, offset: int, call: Callable[[], T], action: str) -> T:
        """call(), retried while the broker is unreachable."""
        backoff = Backoff(self._settings.outage_window_ms / 1000)
        while True:
            try:
                return call()
            except RmqUnavailable as error:
                self._retry_or_fail(backoff, offset, f"{action}: {error.message}")

    def _retry_or_fail(self, backoff: Backoff, offset: int, problem: str) -> None:
        """Wait before the next attempt at `offset`; RmqReadError once the outage window is over."""
        if backoff.remaining() > 0:
            log_retry(backoff, f"reading {self._describe()} at offset {offset}", problem,
                      self._mq.broker_name, OUTAGE_OPTION)
        if not backoff.wait():
            raise RmqReadError(
                f"cannot read {self._describe()} at offset {offset} (range [{self._start}, {self._end})) "
                f"after retrying for {self._settings.outage_window_ms} ms ({OUTAGE_OPTION}): {problem}"
            )

    def _transient_problem(self, offset: int, result: PullResult) -> str | None:
        if result.pull_status == PullStatus.NO_MATCHED_MSG and result.next_begin_offset <= offset:
            return f"message at offset {offset} is being moved ({result.store_status.name})"
        if result.pull_status == PullStatus.NO_NEW_MSG and result.max_offset > offset:
            return f"no message returned at offset {offset} below max offset {result.max_offset}"
        return None

    def _rows(self, pulls: list[rmq_pb2.PackedMessages]) -> Iterator[pa.RecordBatch]:
        """The rows of consecutive pulls as one batch, none when they hold no rows."""
        if pulls:
            yield from self._trimmed(decode_pulls(pulls, self._mq.broker_name, self._settings.read_columns))

    def _trimmed(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """The rows of `batch` below the range's end whose tag is subscribed, in the query's columns;
        none when no row is left."""
        if batch.num_rows and batch.column("queue_offset")[-1].as_py() >= self._end:
            batch = batch.filter(pc.less(batch.column("queue_offset"), self._end))
        batch = filter_tags(batch, self._settings.tags)
        if batch.num_rows:
            columns = self._settings.columns
            yield batch if batch.num_columns == len(columns) else batch.select(list(columns))

    def _advance(self, offset: int, next_begin_offset: int) -> int:
        if next_begin_offset <= offset:
            raise RmqReadError(f"{self._describe()}: broker did not advance past offset {offset}")
        return next_begin_offset

    def _skip_lost(self, offset: int, result: PullResult) -> int:
        """Offsets [offset, resume) are gone: fail, or skip them (failOnDataLoss=false)."""
        retention = result.min_offset > offset
        resume = min(result.min_offset, self._end) if retention else self._end
        cause = "deleted by retention" if retention else "the queue ends before them, messages were lost"
        self._report_gap(offset, resume, result, cause)
        return resume

    def _report_gap(self, offset: int, resume: int, result: PullResult, cause: str) -> None:
        """Fail on the lost offsets [offset, resume), or log them (failOnDataLoss=false)."""
        gap = (
            f"offsets [{offset}, {resume}) of {self._describe()} no longer exist on the broker "
            f"(it holds [{result.min_offset}, {result.max_offset}), {result.store_status.name}): {cause}"
        )
        if self._settings.fail_on_data_loss:
            raise RmqDataLossError(f"{gap}; set failOnDataLoss=false to skip them")
        logger.warning("%s; skipping %d messages (failOnDataLoss=false)", gap, resume - offset)

    def _describe(self) -> str:
        return f"topic {self._mq.topic} broker {self._mq.broker_name} queue {self._mq.queue_id}"

