"""The `rmq` source in a real Spark session when things go wrong: a broker killed and
restarted under a query with default options, a query killed in its first micro-batch, a
stream given a batch-only option, a topic deleted under a running query."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException

from integration_tests.spark_source_support import produce, wait_dispatched
from rmq.connector.client import RmqClient

pytestmark = [pytest.mark.integration, pytest.mark.spark]

DOWN_SECONDS = 4.0   # longer than the former 3 s retry window (pullTimeoutMs)


def rmq_stream(spark, address: str, topic: str, **options: str):
    reader = spark.readStream.format("rmq").option("endpoints", address).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def wait_for(check, what: str, query=None, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if query is not None and query.exception() is not None:
            raise AssertionError(f"query failed while waiting for {what}: {query.exception()}")
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def rows_read(query) -> int:
    return sum(progress["numInputRows"] for progress in query.recentProgress)


@pytest.mark.parametrize("transport", ["flight", "grpc"])   # docs/data-plane.md: identical on both
def test_a_query_with_default_options_rides_out_a_broker_kill9_and_restart(spark, broker, tmp_path: Path,
                                                                           transport: str):
    with RmqClient(broker.address) as client:
        client.create_topic("outage", queues=4)
        bodies = produce(client, "outage", 100)
        wait_dispatched(client, "outage", 100)
    output = tmp_path / "out"
    query = (rmq_stream(spark, broker.address, "outage", startingOffsets="earliest", transport=transport)
             .writeStream.format("parquet").option("path", str(output))
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(processingTime="500 milliseconds").start())
    try:
        wait_for(lambda: rows_read(query) >= 100, "the first 100 messages", query)
        broker.kill()
        time.sleep(DOWN_SECONDS)      # the behaviour under test: an outage this long; triggers meet it
        broker.start()
        with RmqClient(broker.address) as client:
            bodies += produce(client, "outage", 100, start=100)
        wait_for(lambda: rows_read(query) >= 200, "the 100 messages sent after the restart", query)
        assert query.exception() is None and query.isActive
    finally:
        query.stop()
    rows = spark.read.parquet(str(output)).select("queue_id", "queue_offset", "body").collect()
    assert len({(r.queue_id, r.queue_offset) for r in rows}) == len(rows) == 200      # no duplicate
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies)                        # no gap


def test_a_query_without_group_that_died_in_its_first_batch_restarts(spark, broker, tmp_path: Path):
    with RmqClient(broker.address) as client:
        client.create_topic("dies", queues=2)
        bodies = produce(client, "dies", 30)
        wait_dispatched(client, "dies", 30)
    checkpoint = str(tmp_path / "checkpoint")
    batches: dict[int, list[bytes]] = {}

    def die(frame, batch_id: int) -> None:
        raise RuntimeError("driver lost during the first micro-batch")

    def collect(frame, batch_id: int) -> None:
        batches[batch_id] = [bytes(row.body) for row in frame.select("body").collect()]

    def run(sink):
        query = (rmq_stream(spark, broker.address, "dies", startingOffsets="earliest").writeStream
                 .foreachBatch(sink).option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        with contextlib.suppress(StreamingQueryException):   # looked at through query.exception()
            query.awaitTermination(120)
        return query

    assert "driver lost" in str(run(die).exception())
    restarted = run(collect)
    assert restarted.exception() is None, restarted.exception()
    assert sorted(body for rows in batches.values() for body in rows) == sorted(bodies)    # exactly once


@pytest.mark.parametrize("available_now", [False, True])
def test_ending_offsets_on_a_stream_fails_the_query_naming_the_option(spark, broker, available_now):
    writer = (rmq_stream(spark, broker.address, "any", endingOffsets="latest").writeStream.format("memory")
              .queryName(f"ending_on_stream_{int(available_now)}"))
    query = (writer.trigger(availableNow=True) if available_now else writer).start()
    with pytest.raises(Exception, match="Option 'endingOffsets' applies to batch reads only"):
        query.awaitTermination(60)


def test_a_topic_deleted_under_a_running_query_fails_it_at_once(spark, broker, tmp_path: Path):
    with RmqClient(broker.address) as client:
        client.create_topic("doomed", queues=1)
        produce(client, "doomed", 5)
        wait_dispatched(client, "doomed", 5)
        query = (rmq_stream(spark, broker.address, "doomed", startingOffsets="earliest")
                 .writeStream.format("memory").queryName("doomed")
                 .trigger(processingTime="500 milliseconds").start())
        try:
            wait_for(lambda: rows_read(query) >= 5, "the 5 messages", query)
            client.delete_topic("doomed")
            # A refusal is not an outage: the query fails well within the 120 s outage window.
            with contextlib.suppress(StreamingQueryException):
                query.awaitTermination(60)
            assert not query.isActive, "the query kept retrying a deleted topic"
        finally:
            query.stop()
    # Whichever call meets the deletion first (the route refresh planning the batch, or a read) names it.
    failure = str(query.exception())
    assert "TOPIC_NOT_EXIST: " in failure and "topic 'doomed'" in failure, failure
