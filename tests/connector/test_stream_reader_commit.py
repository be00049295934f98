"""The Spark source saves a micro-batch's progress for its consumer group only once the batch is
processed: a query that planned a batch and died before completing it leaves the group's
committed offsets at the start of that batch, so the next reader of the group reads the whole
planned range again (at-least-once), never skips it. The readers are driven the way Spark
drives them (initialOffset -> latestOffset -> partitions -> read on an executor copy ->
commit), against a whole broker in this process; no Spark session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.streaming.datasource import ReadAllAvailable  # noqa: E402

from integration_tests.spark_source_support import (  # noqa: E402
    first_offset,
    positions,
    produce,
    read_batch,
    stream_reader,
    wait_dispatched,
)
from rmq.connector.client import RmqClient  # noqa: E402
from tests.broker_server.in_process_broker import InProcessBroker  # noqa: E402

TOPIC = "planned"
GROUP = "g-planned"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    broker = InProcessBroker(tmp_path / "store").start()
    yield broker
    broker.stop()


def bodies(table) -> list[bytes]:
    return sorted(table.column("body").to_pylist())


def test_a_batch_planned_by_a_reader_that_died_is_read_by_the_next_reader_of_the_group(
        broker: InProcessBroker) -> None:
    with RmqClient(broker.address) as client:
        client.create_topic(TOPIC, queues=4)
        first_bodies = produce(client, TOPIC, 20)
        wait_dispatched(client, TOPIC, 20)

        a = stream_reader(broker.address, TOPIC, consumerGroup=GROUP, startingOffsets="earliest")
        try:
            start = first_offset(a)
            done = a.latestOffset(start, ReadAllAvailable())          # batch 1: processed, committed
            assert bodies(read_batch(a, start, done)) == sorted(first_bodies)
            a.commit(done)
            planned_bodies = produce(client, TOPIC, 20, start=20)
            wait_dispatched(client, TOPIC, 40)
            planned = a.latestOffset(done, ReadAllAvailable())       # batch 2: planned ...
            assert bodies(read_batch(a, done, planned)) == sorted(planned_bodies)
        finally:
            a.stop()                                                 # ... and never completed
        assert client.consumer_list(GROUP, TOPIC) == []

        b = stream_reader(broker.address, TOPIC, consumerGroup=GROUP, startingOffsets="committed")
        try:
            resumed = first_offset(b)
            assert positions(resumed) == positions(done)
            end = b.latestOffset(resumed, ReadAllAvailable())
            assert positions(end) == positions(planned)
            assert bodies(read_batch(b, resumed, end)) == sorted(planned_bodies)
        finally:
            b.stop()
