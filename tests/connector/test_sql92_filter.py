"""SQL92 property filters end to end with a whole broker in this process: 10,000 messages with
`region` ∈ {eu, us, apac} and `amount` 0–999; a pull loop with
`region = 'eu' AND amount BETWEEN 100 AND 500` receives exactly the matching messages, once, in
queue order (the Spark source's reads of the same broker: integration_tests/test_sql92_filter.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.spark.message_decoder import decode
from rmq.subscription import MessageSelector
from tests.broker_server.in_process_broker import InProcessBroker, running_broker

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
def orders_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    """One broker holding the 10,000 orders, shared by the readers of this module."""
    with running_broker(tmp_path_factory.mktemp("sql92"), flush="async") as server:
        with RmqClient(server.address) as client:
            client.create_topic("Orders", queues=QUEUES)
            for start in range(0, len(SENT), 1000):
                client.send("Orders", SENT[start:start + 1000])
        yield server


SENT = orders(10_000)
EXPECTED = matching(SENT)


def test_expected_share() -> None:
    assert len(EXPECTED) == 1337     # a third are eu, 40 % of those have amount 100..500


def test_sql92_pull_receives_exactly_the_matching_messages(orders_broker: InProcessBroker) -> None:
    with RmqClient(orders_broker.address) as client:
        received = read_all(client, "Orders", MessageSelector.by_sql(FILTER))
    for queue_id, bodies in received.items():
        assert bodies == [b for b in EXPECTED if int(b.split(b"-")[1]) % QUEUES == queue_id]
    assert sum(map(len, received.values())) == len(EXPECTED)
