"""The docker-compose topology as local processes: a name server, two brokers registered with
it, a topic with 4 queues on each broker, a producer, and a Spark streaming query that reads
every message of all 8 queues exactly once (then the group's lag is 0); and the Spark sink
writing through the name server to both brokers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.connector.client import OutgoingMessage, RmqClient
from testing import processes

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOPIC = "cluster-orders"
GROUP = "cluster-test"
BROKERS = ("broker-a", "broker-b")
SEND_BATCHES = 12
BATCH = 250


@pytest.fixture
def brokers(namesrv, tmp_path: Path) -> Iterator[dict[str, processes.ServerProcess]]:
    """broker-a and broker-b, registered with `namesrv`."""
    started = {name: processes.broker(tmp_path, name, namesrv.address).start() for name in BROKERS}
    try:
        yield started
    finally:
        for broker in started.values():
            broker.stop()


@pytest.fixture
def cluster(namesrv, brokers) -> Iterator[RmqClient]:
    """A client that knows only the name server, once both brokers registered."""
    with RmqClient(namesrv.address) as client:
        wait_for_registration(client)
        yield client


def wait_for_registration(client: RmqClient, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while set(client.list_brokers()) != set(BROKERS):
        assert time.monotonic() < deadline, f"brokers registered: {client.list_brokers()}"
        time.sleep(0.2)


def wait_for_route(client: RmqClient, expected: list[tuple[str, int]], topic: str = TOPIC,
                   timeout: float = 60.0) -> None:
    """Brokers report new topics to the name server (RocketMQ registerBroker): wait for both."""
    deadline = time.monotonic() + timeout
    while True:
        placed = sorted((mq.broker_name, mq.queue_id) for mq in client.query_route(topic).message_queues)
        if placed == expected:
            return
        assert time.monotonic() < deadline, f"route of {topic}: {placed}"
        time.sleep(0.5)


def test_spark_reads_all_queues_of_both_brokers_exactly_once(spark, namesrv, cluster: RmqClient):
    assert sorted(cluster.create_topic(TOPIC, queues=4)) == list(BROKERS)
    wait_for_route(cluster, [(b, q) for b in BROKERS for q in range(4)])

    bodies = []
    for batch in range(SEND_BATCHES):   # the client sends round-robin over the brokers
        messages = [OutgoingMessage(f"order-{batch}-{i}".encode(), "order", f"k{batch}-{i}")
                    for i in range(BATCH)]
        cluster.send(TOPIC, messages)
        bodies += [m.body for m in messages]
    offsets = cluster.topic_offsets(TOPIC)
    assert {mq.broker_name for mq, q in offsets.items() if q.max_offset > 0} == set(BROKERS)

    query = (
        spark.readStream.format("rmq")
        .options(endpoints=namesrv.address, topic=TOPIC, consumerGroup=GROUP, startingOffsets="earliest",
                 maxMessagesPerTrigger="1000")
        .load()
        .writeStream.format("memory").queryName("cluster_orders").trigger(availableNow=True).start()
    )
    query.awaitTermination(180)
    assert query.exception() is None
    rows = spark.table("cluster_orders").select("broker_name", "queue_id", "queue_offset", "body").collect()

    read = sorted((r.broker_name, r.queue_id, r.queue_offset) for r in rows)
    stored = sorted((mq.broker_name, mq.queue_id, offset)
                    for mq, q in offsets.items() for offset in range(q.min_offset, q.max_offset))
    assert read == stored                                        # every stored message, once
    assert sorted(bytes(r.body) for r in rows) == sorted(bodies)
    committed = cluster.query_consumer_offsets(GROUP, TOPIC)
    assert {mq: committed.get(mq) for mq in offsets} == {mq: q.max_offset for mq, q in offsets.items()}


def test_spark_sink_spreads_writes_over_both_brokers(spark, namesrv, cluster: RmqClient):
    cluster.create_topic("cluster-sink", queues=4)
    wait_for_route(cluster, [(b, q) for b in BROKERS for q in range(4)], topic="cluster-sink")
    rows = spark.range(2000).selectExpr("concat('row-', id) AS body", "'sink' AS tags")
    rows.write.format("rmq").mode("append").options(endpoints=namesrv.address, topic="cluster-sink",
                                                    batchSize="250").save()

    offsets = cluster.topic_offsets("cluster-sink")
    per_broker = {b: sum(q.max_offset for mq, q in offsets.items() if mq.broker_name == b) for b in BROKERS}
    assert sum(per_broker.values()) == 2000 and all(per_broker.values()), per_broker
    back = spark.read.format("rmq").options(endpoints=namesrv.address, topic="cluster-sink").load()
    assert sorted(bytes(r.body) for r in back.select("body").collect()) == sorted(
        f"row-{i}".encode() for i in range(2000)
    )


def test_spark_sink_retries_on_the_live_broker_when_one_is_down(spark, namesrv, brokers, cluster: RmqClient):
    cluster.create_topic("failover", queues=4)
    wait_for_route(cluster, [(b, q) for b in BROKERS for q in range(4)], topic="failover")
    brokers["broker-a"].kill()

    rows = spark.range(1000).selectExpr("concat('f-', id) AS body")
    rows.write.format("rmq").mode("append").options(endpoints=namesrv.address, topic="failover",
                                                    batchSize="100").save()

    broker_b = brokers["broker-b"].address
    with RmqClient(broker_b) as client:
        assert sum(q.max_offset for q in client.topic_offsets("failover").values()) == 1000
    back = spark.read.format("rmq").options(endpoints=broker_b, topic="failover").load()
    assert sorted(bytes(r.body) for r in back.select("body").collect()) == sorted(
        f"f-{i}".encode() for i in range(1000)
    )
