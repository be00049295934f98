"""Planning a Spark batch read (issue 32 item 8), without a Spark session: an endingOffsets
beyond a queue's end is refused when the read is planned, a wrong address fails at once
naming it, and a read narrowed to one broker (pushed broker_name filter) asks no other."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql.datasource import EqualTo

from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.errors import RmqOptionError
from rmq.connector.spark.batch_reader import RmqBatchReader, RmqFilteringBatchReader
from rmq.connector.spark.options import parse_source_options
from tests.broker_server.in_process_broker import InProcessBroker
from tests.dead_broker import closed_address, create_topic, name_server_and_broker_a, register_dead_broker

SHORT_OUTAGE_WINDOW = {"brokerOutageWindowMs": "5000"}   # a broker call that should not happen fails soon


def reader(endpoints: str, topic: str, **options: str) -> RmqBatchReader:
    return RmqFilteringBatchReader(parse_source_options(
        {"endpoints": endpoints, "topic": topic, **SHORT_OUTAGE_WINDOW, **options}, streaming=False))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    broker = InProcessBroker(tmp_path_factory.mktemp("batch-planning") / "store").start()
    with RmqClient(broker.address) as client:
        client.create_topic("Planned", queues=1)
        client.send("Planned", [OutgoingMessage(b"x")] * 2)
    yield broker
    broker.stop()


def test_ending_offsets_beyond_a_queues_end_are_refused_when_planned(broker: InProcessBroker) -> None:
    ending = json.dumps({"Planned": {"broker-a": {"0": 5}}})
    beyond = ("Option 'endingOffsets' gives offset 5 for topic Planned broker broker-a queue 0, which is "
              "beyond the queue's end: its messages end at offset 2")
    with pytest.raises(RmqOptionError, match=beyond):
        reader(broker.address, "Planned", endingOffsets=ending).partitions()
    [partition] = reader(broker.address, "Planned",
                         endingOffsets=json.dumps({"Planned": {"broker-a": {"0": 2}}})).partitions()
    assert (partition.start_offset, partition.end_offset) == (0, 2)


def test_a_wrong_address_fails_at_once_naming_it() -> None:
    address = closed_address()
    with pytest.raises(RmqOptionError, match=f"Option 'endpoints': nothing answers at {address}"):
        reader(address, "Planned").partitions()


def test_a_read_narrowed_to_one_broker_does_not_ask_the_others(tmp_path: Path) -> None:
    with name_server_and_broker_a(tmp_path) as (namesrv_address, client):
        create_topic(client, "Split", queues=2)
        client.send("Split", [OutgoingMessage(b"x", queue_id=q) for q in (0, 1, 1)])
        register_dead_broker(namesrv_address, ["Split"])
        narrowed = reader(namesrv_address, "Split")
        narrowed.pushFilters([EqualTo(("broker_name",), "broker-a")])   # type: ignore[attr-defined]
        planned = narrowed.partitions()
    assert sorted((p.mq, p.start_offset, p.end_offset) for p in planned) == [
        (MessageQueue("Split", "broker-a", 0), 0, 1), (MessageQueue("Split", "broker-a", 1), 0, 2)]
