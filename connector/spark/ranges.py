"""Queue ranges, the Spark tasks of a read, minPartitions and maxRecordsPerPartition: cut queue
offset ranges into contiguous pieces so that a micro-batch (or a batch read) has at least that many
Spark tasks, and no task more than that many offsets (as Kafka's KafkaOffsetRangeCalculator). The
cut depends only on the ranges, so a replayed batch yields the same pieces. The driver plans ranges
here; executors read them with `partition_reader` (which the driver does not import: it loads Arrow
Flight and compute)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pyspark.sql.datasource import InputPartition

from rmq.connector.spark.options import PullSettings
from rmq.message_queue import MessageQueue


@dataclass(frozen=True)
class QueueRangePartition(InputPartition):
    """One Spark task: messages [start_offset, end_offset) of one MessageQueue."""

    mq: MessageQueue
    start_offset: int
    end_offset: int
    pull: PullSettings


def split_ranges(partitions: list[QueueRangePartition], min_partitions: int | None,
                 max_records: int | None = None) -> list[QueueRangePartition]:
    """Each range cut into pieces in proportion to its share of all messages (largest
    remainder: `min_partitions` pieces in all, each range at least one, each piece at least one
    offset), and further into equal pieces of at most `max_records` offsets; unchanged when there
    are already `min_partitions` ranges and none is longer than `max_records`."""
    sizes = [p.end_offset - p.start_offset for p in partitions]
    if min_partitions is None or len(partitions) >= min_partitions:
        counts = [1] * len(partitions)
    else:
        counts = _shares(sizes, min_partitions)
    if max_records is not None:
        counts = [max(count, -(-size // max_records)) for count, size in zip(counts, sizes, strict=True)]
    pieces: list[QueueRangePartition] = []
    for partition, parts in zip(partitions, counts, strict=True):
        size = partition.end_offset - partition.start_offset
        bounds = [partition.start_offset + size * part // parts for part in range(parts + 1)]
        pieces += [replace(partition, start_offset=low, end_offset=high)
                   for low, high in zip(bounds, bounds[1:], strict=False)]
    return pieces


def _shares(sizes: list[int], wanted: int) -> list[int]:
    """Piece counts per range summing to `wanted` (more only when every range needs one),
    proportional to `sizes`, never more than a range's size."""
    total = sum(sizes)
    exact = [size * wanted / total for size in sizes]
    counts = [max(1, min(size, int(share))) for size, share in zip(sizes, exact, strict=True)]
    by_remainder = sorted(range(len(sizes)), key=lambda i: (-(exact[i] - int(exact[i])), i))
    for i in by_remainder:
        if sum(counts) >= wanted:
            break
        if counts[i] < sizes[i]:
            counts[i] += 1
    return counts
