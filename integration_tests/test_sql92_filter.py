"""SQL92 property filters end to end with a real broker process: 10,000 messages with
`region` ∈ {eu, us, apac} and `amount` 0–999; a pull loop with
`region = 'eu' AND amount BETWEEN 100 AND 500` receives exactly the matching messages, once, in
queue order; a broker with enable_property_filter off refuses SQL92 subscriptions clearly."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient, RmqError
from rmq.connector.spark.message_decoder import decode
from rmq.subscription import MessageSelector
from testing import processes

FILTER = "region = 'eu' AND amount BETWEEN 100 AND 500"
REGIONS = ("eu", "us", "apac")
QUEUES = 4


def orders(count: int) -> list[OutgoingMessage]:
    return [OutgoingMessage(f"order-{n}".encode(), tags="Order", keys=f"o{n}", queue_id=n % QUEUES,
                            properties={"region": REGIONS[n % 3], "amount": str((n * 7) % 1000)})
            for n in range(count)]


def matching(messages: list[OutgoingMessage]) -> list[bytes]:
    return [m.body for m in messages
            if m.properties["region"] == "eu" and 100 <= int(m.properties["amount"]) <= 500]


def read_all(client: RmqClient, topic: str, selector: MessageSelector) -> dict[int, list[bytes]]:
    """Every queue pulled from 0 to its end, following nextBeginOffset: bodies per queue."""
    received: dict[int, list[bytes]] = {}
    for queue_id in range(QUEUES):
        mq, offset, end = MessageQueue(topic, "broker-a", queue_id), 0, None
        bodies: list[bytes] = []
        while end is None or offset < end:
            result = client.pull(mq, offset, 256, group="sql-readers", sub_expression=selector)
            end = result.max_offset
            if result.messages.count:
                bodies += decode(result.messages, "broker-a").column("body").to_pylist()
            assert result.next_begin_offset > offset or offset == end
            offset = result.next_begin_offset
        received[queue_id] = bodies
    return received


@pytest.fixture(scope="module")
def orders_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[processes.ServerProcess]:
    """One broker holding the 10,000 orders, shared by the readers of this module."""
    server = processes.broker(tmp_path_factory.mktemp("sql92"), flush="async").start()
    try:
        with RmqClient(server.address) as client:
            client.create_topic("Orders", queues=QUEUES)
            for start in range(0, len(SENT), 1000):
                client.send("Orders", SENT[start:start + 1000])
        yield server
    finally:
        server.stop()


SENT = orders(10_000)
EXPECTED = matching(SENT)


def test_expected_share() -> None:
    assert len(EXPECTED) == 1337     # a third are eu, 40 % of those have amount 100..500


def test_sql92_pull_receives_exactly_the_matching_messages(orders_broker: processes.ServerProcess) -> None:
    with RmqClient(orders_broker.address) as client:
        received = read_all(client, "Orders", MessageSelector.by_sql(FILTER))
    for queue_id, bodies in received.items():
        assert bodies == [b for b in EXPECTED if int(b.split(b"-")[1]) % QUEUES == queue_id]
    assert sum(map(len, received.values())) == len(EXPECTED)


def test_spark_batch_read_with_sql_filter(spark, orders_broker: processes.ServerProcess) -> None:
    frame = (spark.read.format("rmq").option("endpoints", orders_broker.address).option("topic", "Orders")
             .option("sqlFilter", FILTER).load())
    rows = frame.select("body", "properties").collect()
    assert sorted(bytes(row.body) for row in rows) == sorted(EXPECTED)
    assert all(row.properties["region"] == "eu" for row in rows)


def test_spark_refuses_a_malformed_sql_filter_at_load(spark, orders_broker: processes.ServerProcess) -> None:
    with pytest.raises(Exception, match="invalid SQL92 filter at position 26"):
        (spark.read.format("rmq").option("endpoints", orders_broker.address).option("topic", "Orders")
         .option("sqlFilter", "region = 'eu' AND amount >").load())


def test_broker_with_property_filter_off_refuses_sql92(tmp_path: Path) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text("enable_property_filter: false\n")
    server = processes.broker(tmp_path, extra=["--config", str(config)]).start()
    try:
        with RmqClient(server.address) as client:
            client.create_topic("Orders", queues=1)
            with pytest.raises(RmqError, match="does not support filtering messages by SQL92"):
                client.pull(MessageQueue("Orders", "broker-a", 0), 0, 32, group="g",
                            sub_expression=MessageSelector.by_sql(FILTER))
    finally:
        server.stop()
