"""Where a stream starts and what it commits, driven the way Spark drives the reader (no
Spark session): the query's identity is fixed before anything is read, named queues must
exist, start offsets beyond a queue's end are refused, and a changed consumerGroup commits
only what it reads itself."""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from integration_tests.spark_source_support import (
    first_offset,
    positions,
    produce,
    read_batch,
    stream_reader,
    wait_dispatched,
)
from rmq.connector.client import MessageQueue, RmqClient
from rmq.connector.spark.batch_reader import RmqBatchReader
from rmq.connector.spark.options import RmqOptionError, parse_source_options

pytestmark = pytest.mark.integration


@pytest.fixture
def client(broker):
    with RmqClient(broker.address) as rmq:
        yield rmq


def test_a_query_without_group_killed_in_its_first_batch_replays_it_under_the_same_group(broker, client):
    client.create_topic("first", queues=2)
    bodies = produce(client, "first", 10)
    wait_dispatched(client, "first", 10)
    # Run 1 plans batch 0 (Spark writes its end offset to the offset log), then the driver dies.
    first = stream_reader(broker.address, "first", startingOffsets="earliest")
    initial = first.initialOffset()
    planned = first.latestOffset(initial, ReadAllAvailable())
    assert sorted(read_batch(first, initial, planned).column("body").to_pylist()) == sorted(bodies)   # rows
    first.stop()
    produce(client, "first", 4, start=10)
    wait_dispatched(client, "first", 14)
    # Run 2 (a new reader, so a new default group) re-runs batch 0 from a new initial offset.
    restarted = stream_reader(broker.address, "first", startingOffsets="earliest")
    try:
        initial = restarted.initialOffset()
        assert initial["@group"] != planned["@group"]
        # batch 0 replays the range it planned: from its recorded start, not a re-resolved one
        replayed = read_batch(restarted, initial, planned).column("body").to_pylist()
        restarted.commit(planned)                                     # no "offset of consumer group" error
        end = restarted.latestOffset(planned, ReadAllAvailable())
        assert end["@group"] == planned["@group"] and end["@clientId"] == planned["@clientId"]
        rows = read_batch(restarted, planned, end).column("body").to_pylist()
    finally:
        restarted.stop()
    assert sorted(replayed) == sorted(bodies)
    assert sorted(rows) == sorted(f"m-{i}".encode() for i in (10, 11, 12, 13))


def test_json_offsets_must_name_existing_queues_and_start_within_them(broker, client):
    client.create_topic("named", queues=2)
    produce(client, "named", 6)
    wait_dispatched(client, "named", 6)

    def start(option: str, value: str) -> None:
        reader = stream_reader(broker.address, "named", **{option: value})
        try:
            first_offset(reader)
        finally:
            reader.stop()

    with pytest.raises(RmqOptionError, match=r"Option 'startingOffsets' names queues that do not exist: "
                                             r"named:broker-a:7, named:broker-b:0 .*the topics have "
                                             r"named:broker-a:0, named:broker-a:1"):
        start("startingOffsets", '{"named":{"broker-b":{"0":1},"broker-a":{"7":0}}}')
    with pytest.raises(RmqOptionError, match="Option 'startingOffsetsByTimestamp' names queues that do not "
                                             "exist: named:broker-a:9"):
        start("startingOffsetsByTimestamp", '{"named":{"broker-a":{"9":0}}}')
    beyond = ("Option 'startingOffsets' gives offset 50 for topic named broker broker-a queue 1, which is "
              "beyond the queue's end: its messages end at offset 3")
    with pytest.raises(RmqOptionError, match=beyond):
        start("startingOffsets", '{"named":{"broker-a":{"1":50}}}')
    batch = RmqBatchReader(parse_source_options(
        {"endpoints": broker.address, "topic": "named", "endingOffsets": '{"named":{"broker-x":{"0":1}}}'},
        streaming=False))
    with pytest.raises(RmqOptionError, match="Option 'endingOffsets' names queues that do not exist: "
                                             "named:broker-x:0"):
        batch.partitions()


def test_a_checkpoint_restarted_under_another_group_commits_only_what_that_group_reads(broker, client):
    for topic in ("kept", "left"):
        client.create_topic(topic, queues=1)
        produce(client, topic, 5)
        wait_dispatched(client, topic, 5)
    old = stream_reader(broker.address, "kept,left", consumerGroup="g-old", startingOffsets="earliest")
    try:
        start = first_offset(old)
        end = old.latestOffset(start, ReadAllAvailable())
        assert read_batch(old, start, end).num_rows == 10
        old.commit(end)
    finally:
        old.stop()
    # Restarted from the checkpoint with another group and one of the topics: Spark first
    # re-commits the last batch (read by g-old), then plans the next one.
    new = stream_reader(broker.address, "kept", consumerGroup="g-new")
    try:
        new.commit(end)
        assert client.query_consumer_offsets("g-new") == {}           # g-old's reads are not g-new's
        produce(client, "kept", 2, start=5)
        wait_dispatched(client, "kept", 7)
        following = new.latestOffset(end, ReadAllAvailable())
        assert positions(following) == {"kept:broker-a:0": 7}
        assert read_batch(new, end, following).num_rows == 2
        new.commit(following)
    finally:
        new.stop()
    assert client.query_consumer_offsets("g-new") == {MessageQueue("kept", "broker-a", 0): 7}
    assert client.query_consumer_offsets("g-old") == {
        MessageQueue("kept", "broker-a", 0): 5, MessageQueue("left", "broker-a", 0): 5}
