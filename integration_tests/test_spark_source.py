"""`format("rmq")` in a real local Spark session against a real broker process. Few and lean:
each streaming query costs seconds."""

from __future__ import annotations

import json
import time

import pytest

from integration_tests.spark_source_support import (
    positions,
    produce,
    retained_min_offset,
    retention_config,
    wait_dispatched,
)
from rmq.connector.client import MessageQueue, RmqClient
from testing import processes

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture
def client(broker):
    with RmqClient(broker.address) as rmq:
        yield rmq


def rmq_stream(spark, broker, topic: str, **options: str):
    reader = spark.readStream.format("rmq").option("endpoints", broker.address).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


@pytest.mark.parametrize("transport", ["flight", "grpc"])   # docs/data-plane.md: identical on both
def test_stream_reads_every_message_once_in_bounded_batches_and_resumes_from_checkpoint(
        spark, broker, client, tmp_path, transport):
    client.create_topic("events", queues=8)
    bodies = produce(client, "events", 200)
    wait_dispatched(client, "events", 200)
    output, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run_available_now() -> list[int]:
        query = (
            rmq_stream(spark, broker, "events", startingOffsets="earliest", maxMessagesPerTrigger="60",
                       consumerGroup="g-events", transport=transport)
            .writeStream.format("parquet").option("path", str(output))
            .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start()
        )
        assert query.awaitTermination(180), "Trigger.AvailableNow query did not stop"
        assert query.exception() is None
        return [progress["numInputRows"] for progress in query.recentProgress]

    first = run_available_now()
    assert sum(first) == 200 and max(first) <= 60 and len([n for n in first if n]) >= 4
    bodies += produce(client, "events", 100, start=200)
    wait_dispatched(client, "events", 300)
    second = run_available_now()                      # restarted from the checkpoint
    assert sum(second) == 100 and max(second) <= 60

    rows = spark.read.parquet(str(output)).select("queue_id", "queue_offset", "body", "topic").collect()
    assert len({(r.queue_id, r.queue_offset) for r in rows}) == len(rows) == 300    # no duplicate
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies)                    # no gap
    assert {r.topic for r in rows} == {"events"}
    committed = client.query_consumer_offsets("g-events", "events")
    assert committed == {mq: o.max_offset for mq, o in client.topic_offsets("events").items()}   # lag 0


def test_two_queries_in_one_group_share_the_queues(spark, broker, client):
    client.create_topic("shared", queues=8)
    queries = []

    def start_query(i: int) -> None:
        queries.append(
            rmq_stream(spark, broker, "shared", consumerGroup="g-shared")
            .writeStream.format("memory").queryName(f"shared_{i}")
            .trigger(processingTime="500 milliseconds").start())
        _wait_for(lambda: client.consumer_list("g-shared", "shared"), lambda ids: len(ids) == i + 1)

    try:
        start_query(0)        # alone: owns all 8 queues
        start_query(1)        # joins: owns its half from the start
        # The first query gives up the other half at its next micro-batch (an empty batch:
        # only its offset changes).
        _wait_for(lambda: queries[0].lastProgress, lambda p: p and len(_owned(p)) == 4)
        bodies = produce(client, "shared", 160)
        wait_dispatched(client, "shared", 160)
        tables = _wait_for(
            lambda: [spark.sql(f"select queue_id, body from shared_{i}").collect() for i in range(2)],
            lambda results: sum(map(len, results)) >= 160)
        owned = [_owned(query.lastProgress) for query in queries]
    finally:
        for query in queries:
            query.stop()
    assert sorted(owned) == [[0, 1, 2, 3], [4, 5, 6, 7]]      # avg: contiguous halves
    for rows, queues in zip(tables, owned, strict=True):
        assert {r.queue_id for r in rows} == set(queues)
    assert sorted(bytes(r.body) for rows in tables for r in rows) == sorted(bodies)   # exactly once
    # Stopped queries unregister (Spark stops the source shortly after query.stop() returns).
    _wait_for(lambda: client.consumer_list("g-shared", "shared"), lambda ids: ids == [], timeout=30)


def test_batch_read_with_ending_offsets_and_tag_filter(spark, broker, client):
    client.create_topic("batch", queues=2)
    produce(client, "batch", 10, tags="keep", prefix="k")
    produce(client, "batch", 10, tags="drop", prefix="d")
    wait_dispatched(client, "batch", 20)
    df = (
        spark.read.format("rmq").option("endpoints", broker.address).option("topic", "batch")
        .option("subExpression", "keep")
        .option("endingOffsets", json.dumps({"batch": {"broker-a": {"0": 4, "1": -1}}}))
        .load()
    )
    rows = df.select("queue_id", "queue_offset", "tags", "body", "store_timestamp", "properties").collect()
    # Each queue holds 5 'keep' (offsets 0..4) then 5 'drop'; queue 0 is read below offset 4.
    assert sorted((r.queue_id, r.queue_offset) for r in rows) == [(0, 0), (0, 1), (0, 2), (0, 3)] + [
        (1, o) for o in range(5)]
    assert {r.tags for r in rows} == {"keep"}
    assert all(r.store_timestamp.year >= 2024 and r.properties["TAGS"] == "keep" for r in rows)


def test_bad_options_fail_at_load_naming_the_option(spark, broker):
    with pytest.raises(Exception, match="Invalid value 'foo' for option 'allocateStrategy': expected one of "
                                        "avg, circle"):
        spark.read.format("rmq").option("endpoints", broker.address).option("topic", "t") \
            .option("allocateStrategy", "foo").load()
    with pytest.raises(Exception, match="Option 'topic' is required"):
        spark.readStream.format("rmq").option("endpoints", broker.address).load()


def _owned(progress: dict) -> list[int]:
    """Queue ids in the end offset of a query's progress report."""
    end = json.loads(progress["sources"][0]["endOffset"])
    return sorted(int(key.rsplit(":", 1)[1]) for key in positions(end))


def _wait_for(fetch, done, timeout: float = 90.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        assert time.monotonic() < deadline, f"timed out; last value {value!r}"
        time.sleep(0.5)


def test_fail_on_data_loss_in_a_spark_read(spark, tmp_path):
    server = processes.broker(tmp_path, extra=retention_config(tmp_path)).start()
    try:
        with RmqClient(server.address) as rmq:
            rmq.create_topic("retained", queues=1)
            for start in range(0, 200, 20):
                produce(rmq, "retained", 20, start=start)
            wait_dispatched(rmq, "retained", 200)
            low = retained_min_offset(rmq, MessageQueue("retained", "broker-a", 0))

        def read(fail_on_data_loss: str):
            return (spark.read.format("rmq").option("endpoints", server.address).option("topic", "retained")
                    .option("startingOffsets", '{"retained":{"broker-a":{"0":0}}}')
                    .option("failOnDataLoss", fail_on_data_loss).load())

        with pytest.raises(Exception, match=rf"offsets \[0, {low}\) of topic retained broker broker-a "
                                            r"queue 0 no longer exist .*deleted by retention"):
            read("true").collect()
        offsets = [r.queue_offset for r in read("false").select("queue_offset").collect()]
        assert offsets == list(range(low, 200))
    finally:
        server.stop()


def test_a_query_names_its_columns_and_a_restart_with_another_schema_resumes_at_its_offsets(
        spark, broker, client, tmp_path):
    """`.schema(...)`: exactly those columns in that order, for streams and batch reads; the schema is
    not part of the offsets, so a checkpoint restarted with another one goes on where it was."""
    client.create_topic("named", queues=2)
    bodies = produce(client, "named", 20)
    wait_dispatched(client, "named", 20)
    checkpoint, seen = tmp_path / "checkpoint", []

    def run(schema: str) -> list[str]:
        frame = (spark.readStream.format("rmq").schema(schema).option("endpoints", broker.address)
                 .option("topic", "named").option("startingOffsets", "earliest").load())
        query = (frame.writeStream.foreachBatch(lambda batch, _: seen.extend(batch.collect()))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        assert query.awaitTermination(180) and query.exception() is None
        return frame.columns

    assert run("body binary, queue_offset long, queue_id int") == ["body", "queue_offset", "queue_id"]
    assert sorted(bytes(row.body) for row in seen) == sorted(bodies)
    bodies = produce(client, "named", 10, start=20)
    wait_dispatched(client, "named", 30)
    seen.clear()
    assert run("queue_id int, store_timestamp timestamp, body binary, properties map<string,string>") == [
        "queue_id", "store_timestamp", "body", "properties"]
    assert sorted(bytes(row.body) for row in seen) == sorted(bodies)             # only the new ones
    rows = (spark.read.format("rmq").schema("queue_offset long, tags string")
            .option("endpoints", broker.address).option("topic", "named").load().collect())
    assert len(rows) == 30 and rows[0].__fields__ == ["queue_offset", "tags"]


@pytest.mark.parametrize(("schema", "message"), [
    ("queue_id int, nope string", "Column 'nope' of the schema is not a column of the rmq source: the rmq "
                                  "source's columns are topic string, broker_name string"),
    ("body string", "Column 'body' of the schema is binary in the rmq source, not string"),
    ("body binary, body binary", "Column 'body' of the schema is named twice"),
])
def test_a_bad_schema_fails_at_the_start_naming_the_column(spark, broker, schema, message):
    """With `.schema(...)`, Spark runs no Python at load(): the batch read's first action and the
    stream's first micro-batch refuse it."""
    with pytest.raises(Exception, match=message):
        spark.read.format("rmq").schema(schema).option("endpoints", broker.address).option("topic", "t") \
            .load().collect()
    query = (spark.readStream.format("rmq").schema(schema).option("endpoints", broker.address)
             .option("topic", "t").load().writeStream.format("noop").start())
    with pytest.raises(Exception, match=message):
        query.awaitTermination(60)
