"""Kafka-style source options against a real broker, driven the way Spark drives the
readers (no Spark session): minPartitions, topicPattern, committedFallback, the timestamp
forms of the start and end offsets, and minMessagesPerTrigger / maxTriggerDelay."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

from integration_tests.spark_source_support import (
    first_offset,
    positions,
    produce,
    read_batch,
    stream_reader,
    wait_dispatched,
)
from rmq.connector.client import MessageQueue, RmqClient
from rmq.connector.errors import OffsetResolutionError
from rmq.connector.spark.batch_reader import RmqBatchReader, RmqFilteringBatchReader
from rmq.connector.spark.options import parse_source_options
from rmq.connector.spark.source_schema import ALL_COLUMNS
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def client(broker):
    with RmqClient(broker.address) as rmq:
        yield rmq


def batch_reader(endpoints: str, columns: tuple[str, ...] = ALL_COLUMNS, **options: str) -> RmqBatchReader:
    return RmqBatchReader(parse_source_options({"endpoints": endpoints, **options}, streaming=False,
                                               columns=columns))


def read_all(reader, partitions) -> list[tuple[int, int]]:
    return sorted((row["queue_id"], row["queue_offset"]) for p in partitions for batch in reader.read(p)
                  for row in batch.select(["queue_id", "queue_offset"]).to_pylist())


def test_min_partitions_cuts_queue_ranges_into_contiguous_pieces(broker, client, columns):
    client.create_topic("wide", queues=8)
    produce(client, "wide", 110)               # uneven: some queues hold one message more
    wait_dispatched(client, "wide", 110)
    plain = batch_reader(broker.address, columns, topic="wide")
    cut = batch_reader(broker.address, columns, topic="wide", minPartitions="16")
    assert len(plain.partitions()) == 8
    pieces = cut.partitions()
    assert len(pieces) == 16 and pieces == cut.partitions()                  # replays cut the same way
    for mq in {p.mq for p in pieces}:
        spans = [(p.start_offset, p.end_offset) for p in pieces if p.mq == mq]
        assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
    assert read_all(cut, pieces) == read_all(plain, plain.partitions())      # the same rows
    client.create_topic("narrow", queues=1)                                 # one queue, three tasks
    produce(client, "narrow", 14)
    wait_dispatched(client, "narrow", 14)
    single = batch_reader(broker.address, topic="narrow", minPartitions="3")
    assert [(p.start_offset, p.end_offset) for p in single.partitions()] == [(0, 4), (4, 9), (9, 14)]


def test_topic_pattern_picks_up_topics_created_later_and_drops_deleted_ones(broker, client, caplog):
    client.create_topic("metrics-a", queues=1)
    client.create_topic("other", queues=1)
    produce(client, "metrics-a", 3)
    produce(client, "other", 3)
    wait_dispatched(client, "metrics-a", 3)
    reader = stream_reader(broker.address, None, topicPattern="metrics-.*", startingOffsets="earliest")
    try:
        start = first_offset(reader)
        assert set(positions(start)) == {"metrics-a:broker-a:0"}
        client.create_topic("metrics-b", queues=2)
        produce(client, "metrics-b", 4)
        wait_dispatched(client, "metrics-b", 4)
        adopted = reader.latestOffset(start, ReadAllAvailable())          # new topic: from its earliest
        assert positions(adopted) == {"metrics-a:broker-a:0": 3, "metrics-b:broker-a:0": 0,
                                      "metrics-b:broker-a:1": 0}
        assert read_batch(reader, start, adopted).num_rows == 3
        end = reader.latestOffset(adopted, ReadAllAvailable())
        assert sorted(read_batch(reader, adopted, end).column("body").to_pylist()) == [
            b"m-0", b"m-1", b"m-2", b"m-3"]
        client.delete_topic("metrics-a")
        after = reader.latestOffset(end, ReadAllAvailable())
        assert set(positions(after)) == {"metrics-b:broker-a:0", "metrics-b:broker-a:1"}
    finally:
        reader.stop()
    assert any("topic metrics-a matching topicPattern is gone" in r.getMessage() for r in caplog.records)


def test_committed_fallback_decides_where_uncommitted_queues_start(broker, client):
    client.create_topic("fallback", queues=2)
    produce(client, "fallback", 10)
    wait_dispatched(client, "fallback", 10)
    q0 = MessageQueue("fallback", "broker-a", 0)
    client.update_consumer_offsets("g-fallback", {q0: 2})                    # queue 1 never committed

    def start(**options: str) -> dict[str, int]:
        reader = stream_reader(broker.address, "fallback", consumerGroup="g-fallback",
                               startingOffsets="committed", **options)
        try:
            return positions(first_offset(reader))
        finally:
            reader.stop()

    assert start() == {"fallback:broker-a:0": 2, "fallback:broker-a:1": 5}              # latest
    assert start(committedFallback="earliest") == {"fallback:broker-a:0": 2, "fallback:broker-a:1": 0}
    with pytest.raises(OffsetResolutionError, match="no committed offset for topic fallback broker broker-a "
                                                    r"queue 1 \(committedFallback=error\)"):
        start(committedFallback="error")


def test_timestamp_starts_and_ends(broker, client):
    client.create_topic("stamps", queues=1)
    mq = MessageQueue("stamps", "broker-a", 0)
    produce(client, "stamps", 3)
    wait_dispatched(client, "stamps", 3)
    time.sleep(0.05)   # not an event: the clock moves on, so "middle" lies strictly between the batches
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    produce(client, "stamps", 3, start=3)
    wait_dispatched(client, "stamps", 6)
    assert client.search_offset(mq, middle) == 3
    by_time = f'{{"stamps":{{"broker-a":{{"0":{middle}}}}}}}'
    later = batch_reader(broker.address, topic="stamps", startingOffsetsByTimestamp=by_time)
    assert read_all(later, later.partitions()) == [(0, 3), (0, 4), (0, 5)]
    earlier = batch_reader(broker.address, topic="stamps", endingTimestamp=str(middle))
    assert read_all(earlier, earlier.partitions()) == [(0, 0), (0, 1), (0, 2)]
    ending = batch_reader(broker.address, topic="stamps", endingOffsetsByTimestamp=by_time)
    assert read_all(ending, ending.partitions()) == [(0, 0), (0, 1), (0, 2)]
    reader = stream_reader(broker.address, "stamps", startingOffsetsByTimestamp=by_time)
    try:
        assert positions(first_offset(reader)) == {"stamps:broker-a:0": 3}
    finally:
        reader.stop()
    future = int(time.time() * 1000) + 3_600_000     # no message at or after it
    for strategy, start in (("latest", 6), ("error", None)):
        reader = stream_reader(broker.address, "stamps", startingOffsets=f"timestamp:{future}",
                               startingOffsetsByTimestampStrategy=strategy)
        try:
            if start is not None:
                assert positions(first_offset(reader)) == {"stamps:broker-a:0": start}
            else:
                missing = "no message of topic stamps broker broker-a queue 0 was stored at or after"
                with pytest.raises(OffsetResolutionError, match=f"{missing} timestamp {future}"):
                    first_offset(reader)
        finally:
            reader.stop()


def test_max_bytes_per_trigger_bounds_micro_batches_by_stored_bytes(broker, client):
    client.create_topic("bytes", queues=2)
    produce(client, "bytes", 60)          # m-0 .. m-59: records of about the same size
    wait_dispatched(client, "bytes", 60)
    record = client.pull(MessageQueue("bytes", "broker-a", 0), 10, 1, group="g").messages.sizes
    size = int.from_bytes(record, "little")
    limit = str(10 * size)
    reader = stream_reader(broker.address, "bytes", startingOffsets="earliest", maxBytesPerTrigger=limit)
    both = stream_reader(broker.address, "bytes", startingOffsets="earliest", maxBytesPerTrigger=limit,
                         maxMessagesPerTrigger="4")
    try:
        assert reader.getDefaultReadLimit() == ReadMaxBytes(10 * size)
        start, sizes = first_offset(reader), []
        reader.prepareForTriggerAvailableNow()
        while (end := reader.latestOffset(start, reader.getDefaultReadLimit())) != start:
            sizes.append(read_batch(reader, start, end).num_rows)
            start = end
        assert sum(sizes) == 60 and max(sizes) <= 10 and len(sizes) >= 6
        start = first_offset(both)
        end = both.latestOffset(start, both.getDefaultReadLimit())
        assert sum(positions(end).values()) == 4                     # the rows limit binds within it
    finally:
        reader.stop()
        both.stop()


def test_min_messages_per_trigger_waits_for_enough_messages_or_the_delay(broker, client):
    client.create_topic("trickle", queues=2)
    reader = stream_reader(broker.address, "trickle", minMessagesPerTrigger="10", maxTriggerDelay="1500ms",
                           maxMessagesPerTrigger="12")
    try:
        start = first_offset(reader)
        produce(client, "trickle", 4)
        wait_dispatched(client, "trickle", 4)
        assert reader.latestOffset(start, ReadMaxRows(12)) == start          # 4 < 10: wait
        produce(client, "trickle", 16, start=4)
        wait_dispatched(client, "trickle", 20)
        triggered_at = time.monotonic()
        enough = reader.latestOffset(start, ReadMaxRows(12))
        assert sum(positions(enough).values()) == 12                          # maxMessagesPerTrigger caps
        assert reader.latestOffset(enough, ReadMaxRows(12)) == enough         # 8 pending < 10: wait...
        late = wait_until(lambda: (end := reader.latestOffset(enough, ReadMaxRows(12))) != enough and end,
                          "the next micro-batch planned at maxTriggerDelay", interval=0.1)
        assert time.monotonic() - triggered_at >= 1.5                         # ...until maxTriggerDelay
        assert sum(positions(late).values()) == 20
    finally:
        reader.stop()


def test_pushed_filters_narrow_what_a_batch_read_pulls(broker, client):
    client.create_topic("filtered", queues=2)
    for i in range(10):
        produce(client, "filtered", 2, tags="A" if i % 2 else "B", start=2 * i)   # each queue: B, A, B, A...
    wait_dispatched(client, "filtered", 20)
    time.sleep(0.05)   # not an event: the clock moves on, so "middle" lies strictly between the batches
    middle = datetime.now(UTC)
    time.sleep(0.05)
    produce(client, "filtered", 4, tags="A", start=20)                          # offsets 10, 11 per queue
    wait_dispatched(client, "filtered", 24)
    options = {"endpoints": broker.address, "topic": "filtered"}
    plain = RmqBatchReader(parse_source_options(options, streaming=False))
    assert sum(p.end_offset - p.start_offset for p in plain.partitions()) == 24

    def pulled(*filters) -> tuple[int, list[tuple[int, int, str]]]:
        reader = RmqFilteringBatchReader(parse_source_options(options, streaming=False))
        assert list(reader.pushFilters(list(filters))) == list(filters)      # Spark re-checks every row
        partitions = reader.partitions()
        rows = sorted((row["queue_id"], row["queue_offset"], row["tags"]) for p in partitions
                      for batch in reader.read(p) for row in batch.to_pylist())
        return sum(p.end_offset - p.start_offset for p in partitions), rows

    span, rows = pulled(EqualTo(("queue_id",), 1), GreaterThanOrEqual(("queue_offset",), 6),
                        LessThan(("queue_offset",), 9))
    assert span == 3 and [(q, o) for q, o, _ in rows] == [(1, 6), (1, 7), (1, 8)]
    span, rows = pulled(In(("tags",), ("A", "C")), EqualTo(("broker_name",), "broker-a"))
    assert {tag for _, _, tag in rows} == {"A"} and len(rows) == 14            # the broker filters by tag
    assert pulled(EqualTo(("topic",), "elsewhere")) == (0, [])
    span, rows = pulled(GreaterThanOrEqual(("store_timestamp",), middle))
    assert span == 4 and [(q, o) for q, o, _ in rows] == [(0, 10), (0, 11), (1, 10), (1, 11)]
