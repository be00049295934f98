"""Kafka-parity features of the `rmq` source in a real Spark session: minPartitions tasks,
filter pushdown through Spark's planner, and the lag listener."""

from __future__ import annotations

import time

import pytest

from integration_tests.spark_source_support import produce, wait_dispatched
from rmq.connector.client import RmqClient
from rmq.connector.spark.lag import RmqLagListener

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def rmq_read(spark, address: str, topic: str, **options: str):
    return spark.read.format("rmq").options(endpoints=address, topic=topic, **options).load()


@pytest.mark.parametrize("transport", ["flight", "grpc"])   # docs/data-plane.md: identical on both
def test_min_partitions_gives_that_many_tasks_and_the_same_rows(spark, broker, transport):
    with RmqClient(broker.address) as client:
        client.create_topic("tasks", queues=8)
        produce(client, "tasks", 160)
        wait_dispatched(client, "tasks", 160)
    plain = rmq_read(spark, broker.address, "tasks", transport=transport)
    cut = rmq_read(spark, broker.address, "tasks", minPartitions="16", transport=transport)
    assert plain.rdd.getNumPartitions() == 8 and cut.rdd.getNumPartitions() == 16
    key = ["queue_id", "queue_offset", "body"]
    assert sorted(cut.select(key).collect()) == sorted(plain.select(key).collect())


@pytest.mark.parametrize("transport", ["flight", "grpc"])
def test_filters_are_pushed_into_the_pulls(spark, broker, transport):
    with RmqClient(broker.address) as client:
        client.create_topic("pushed", queues=4)
        produce(client, "pushed", 40, tags="A")
        produce(client, "pushed", 40, tags="B", start=40)
        wait_dispatched(client, "pushed", 80)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = rmq_read(spark, broker.address, "pushed", transport=transport).filter(
            "queue_id = 2 and queue_offset >= 8 and tags = 'B'")
        assert df.rdd.getNumPartitions() == 1                                  # one queue pulled, not 4
        assert sorted((r.queue_id, r.queue_offset, r.tags) for r in df.collect()) == [
            (2, offset, "B") for offset in range(10, 20)]
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    unpushed = rmq_read(spark, broker.address, "pushed").filter("queue_id = 2")   # the setting off: no error
    assert unpushed.count() == 20 and unpushed.rdd.getNumPartitions() == 4


def test_lag_listener_reports_messages_behind_latest(spark, broker):
    with RmqClient(broker.address) as client:
        client.create_topic("lagging", queues=2)
        produce(client, "lagging", 100)
        wait_dispatched(client, "lagging", 100)
    listener = RmqLagListener()
    spark.streams.addListener(listener)
    query = (spark.readStream.format("rmq").options(endpoints=broker.address, topic="lagging",
                                                    startingOffsets="earliest", maxMessagesPerTrigger="40")
             .load().writeStream.format("memory").queryName("lagging")
             .trigger(processingTime="200 milliseconds").start())
    seen = []
    try:
        deadline = time.monotonic() + 120
        while not seen or seen[-1].total:
            assert time.monotonic() < deadline, f"lag never reached 0: {seen}"
            lag = listener.of(query)
            if lag is not None and (not seen or lag != seen[-1]):
                seen.append(lag)
            time.sleep(0.1)
    finally:
        query.stop()
        spark.streams.removeListener(listener)
    # at most 40 per batch, from batch 0 on (it starts at the start offsets, all 100 behind)
    assert [lag.total for lag in seen] == [total for total in (60, 20, 0) if total in
                                           {lag.total for lag in seen}] and seen[0].total == 60
    assert all(lag.queues == 2 and lag.min <= lag.avg <= lag.max for lag in seen)
    assert seen[-1].total == 0 and seen[-1].name == "lagging"
