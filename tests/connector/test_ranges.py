"""minPartitions and maxRecordsPerPartition: queue ranges cut into contiguous pieces (Kafka's
KafkaOffsetRangeCalculator), the same cut for the same ranges."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from rmq.connector.spark.options import PullSettings  # noqa: E402
from rmq.connector.spark.ranges import QueueRangePartition, split_ranges  # noqa: E402
from rmq.message_queue import MessageQueue  # noqa: E402

PULL = PullSettings("127.0.0.1:1", "g", "*", None, 32, 1000, True)


def ranges(*spans: tuple[int, int, int]) -> list[QueueRangePartition]:
    return [QueueRangePartition(MessageQueue("t", "b", queue), low, high, PULL) for queue, low, high in spans]


def spans(partitions: list[QueueRangePartition]) -> list[tuple[int, int, int]]:
    return [(p.mq.queue_id, p.start_offset, p.end_offset) for p in partitions]


def test_max_records_per_partition_cuts_long_ranges_into_equal_pieces():
    assert spans(split_ranges(ranges((0, 0, 10), (1, 5, 8)), None, 4)) == [
        (0, 0, 3), (0, 3, 6), (0, 6, 10), (1, 5, 8)]
    assert split_ranges(ranges((0, 0, 10)), None, 10) == ranges((0, 0, 10))   # short enough: as it was


def test_max_records_per_partition_with_min_partitions_takes_the_finer_cut():
    # minPartitions alone: 3 pieces of queue 0, 1 of queue 1; maxRecordsPerPartition 2 cuts queue 1 too
    assert spans(split_ranges(ranges((0, 0, 9), (1, 0, 3)), 4, None)) == [
        (0, 0, 3), (0, 3, 6), (0, 6, 9), (1, 0, 3)]
    assert spans(split_ranges(ranges((0, 0, 9), (1, 0, 3)), 4, 2)) == [
        (0, 0, 1), (0, 1, 3), (0, 3, 5), (0, 5, 7), (0, 7, 9), (1, 0, 1), (1, 1, 3)]
