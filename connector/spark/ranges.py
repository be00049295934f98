"""minPartitions: cut queue offset ranges into contiguous pieces so that a micro-batch (or a
batch read) has at least that many Spark tasks (Kafka's KafkaOffsetRangeCalculator, with
rounding up so the count is never below the option). The cut depends only on the ranges, so
a replayed batch yields the same pieces."""

from __future__ import annotations

import math
from dataclasses import replace

from rmq.connector.spark.partition_reader import QueueRangePartition


def split_ranges(partitions: list[QueueRangePartition], min_partitions: int | None
                 ) -> list[QueueRangePartition]:
    """Each range cut into pieces in proportion to its share of all messages, each piece
    holding at least one offset; unchanged when there are already `min_partitions` ranges."""
    if min_partitions is None or len(partitions) >= min_partitions:
        return partitions
    total = sum(p.end_offset - p.start_offset for p in partitions)
    pieces: list[QueueRangePartition] = []
    for partition in partitions:
        size = partition.end_offset - partition.start_offset
        parts = min(size, max(1, math.ceil(size * min_partitions / total)))
        bounds = [partition.start_offset + size * part // parts for part in range(parts + 1)]
        pieces += [replace(partition, start_offset=low, end_offset=high)
                   for low, high in zip(bounds, bounds[1:], strict=False)]
    return pieces
