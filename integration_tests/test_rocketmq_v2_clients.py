"""The official RocketMQ 5 Python client (`rocketmq-python-client`, PyPI) against real `rmq broker`
processes speaking `apache.rocketmq.v2.MessagingService` (docs/manual/rocketmq-clients.md; spec
rocketmq-v2-protocol.md): pop consumption survives broker restarts (SIGTERM, kill -9), a broker
started with --acl admits signed clients with the permission only, routes through the name
server name every broker of the topic, and the Spark source reads what the client sent. The
rest, on an in-process broker: tests/broker_server/test_rocketmq_v2_clients.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.connector.client import RmqClient
from testing import processes
from tests.acl_files import write_acl
from tests.rocketmq_clients import (
    BROKER_SETTINGS,
    ForbiddenException,
    bounded,
    configuration,
    message,
    pulled,
    receive_until,
    rocketmq,
    send_all,
    simple_consumer,
    started,
    topic_of_the_test,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
TOPIC = "orders"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[processes.ServerProcess]:
    directory = tmp_path_factory.mktemp("v2-broker")
    config = directory / "broker.json"
    config.write_text(json.dumps(BROKER_SETTINGS))
    server = processes.broker(directory, extra=["--config", str(config)]).start()
    yield server
    server.stop()


@pytest.fixture
def topic(broker: processes.ServerProcess, request: pytest.FixtureRequest) -> str:
    return topic_of_the_test(broker.address, request)


@pytest.mark.parametrize("stop", ["sigterm", "kill"])
def test_pop_state_survives_a_broker_restart(broker, topic, stop):
    bodies = [f"m{i}".encode() for i in range(12)]
    send_all(broker.address, [message(topic, body) for body in bodies])
    with started(simple_consumer(broker.address, topic, "g-restart")) as consumer:
        first = receive_until(consumer, 6, ack=False, timeout=10)
        acked, held = first[:4], first[4:]
        for item in acked:
            bounded(lambda item=item: consumer.ack(item))
        for item in held:   # visible again one second after the restart's receive starts
            bounded(lambda item=item: consumer.change_invisible_duration(item, 1))
    if stop == "kill":
        broker.kill()
        broker.start()
    else:
        broker.restart()
    with started(simple_consumer(broker.address, topic, "g-restart")) as consumer:
        rest = receive_until(consumer, len(bodies) - len(acked), timeout=20)
        assert bounded(lambda: consumer.receive(32, 10)) == []
    assert sorted(m.body for m in rest) == sorted(set(bodies) - {m.body for m in acked})
    attempts = {m.body: m.delivery_attempt for m in rest}
    assert all(attempts[m.body] == 2 for m in held)
    with RmqClient(broker.address) as client:   # the pop group's progress is its consumer offset
        assert sum(client.query_consumer_offsets("g-restart", topic).values()) == len(bodies)


ADMIN = ("admin01", "admin-secret-0001")
PRODUCER = ("producer1", "producer-secret-01")   # PUB on orders
CONSUMER = ("consumer1", "consumer-secret-01")   # SUB on orders and on group g-acl
ACL = f"""\
accounts:
  - {{accessKey: {ADMIN[0]}, secretKey: "{ADMIN[1]}", admin: true}}
  - {{accessKey: {PRODUCER[0]}, secretKey: "{PRODUCER[1]}", topicPerms: ["{TOPIC}=PUB"]}}
  - {{accessKey: {CONSUMER[0]}, secretKey: "{CONSUMER[1]}", topicPerms: ["{TOPIC}=SUB"],
     groupPerms: ["g-acl=SUB"]}}
"""


@pytest.fixture
def acl_broker(tmp_path: Path) -> Iterator[processes.ServerProcess]:
    server = processes.broker(tmp_path, extra=["--acl", str(write_acl(tmp_path / "acl.yml", ACL))]).start()
    with RmqClient(server.address, access_key=ADMIN[0], secret_key=ADMIN[1]) as client:
        client.create_topic(TOPIC, queues=4)
    yield server
    server.stop()


def acl_consumer(address: str, account: tuple[str, str]):
    return rocketmq.SimpleConsumer(configuration(address, *account), "g-acl",
                                   {TOPIC: rocketmq.FilterExpression("*")}, await_duration=2)


def test_acl_broker_admits_signed_clients_with_the_permission_and_refuses_the_others(acl_broker):
    address = acl_broker.address
    with started(rocketmq.Producer(configuration(address, *PRODUCER), (TOPIC,))) as producer:
        bounded(lambda: producer.send(message(TOPIC, b"signed")))
    with started(acl_consumer(address, CONSUMER)) as consumer:
        assert [m.body for m in receive_until(consumer, 1, timeout=10)] == [b"signed"]
    impostor = configuration(address, PRODUCER[0], "not-the-secret")
    with started(rocketmq.Producer(impostor, (TOPIC,))) as producer:
        with pytest.raises(Exception, match="failed to fetch topic:orders route"):   # refused already
            bounded(lambda: producer.send(message(TOPIC, b"forged")))
    assert "signature not accepted for access key 'producer1'" in acl_broker.log()
    with started(rocketmq.Producer(configuration(address, *CONSUMER), (TOPIC,))) as producer:
        with pytest.raises(ForbiddenException, match="lacks PUB"):
            bounded(lambda: producer.send(message(TOPIC, b"sub-only")))
    with started(acl_consumer(address, PRODUCER)) as consumer:
        with pytest.raises(ForbiddenException, match="lacks SUB"):
            bounded(lambda: consumer.receive(32, 20))
    # nothing refused was stored
    assert [row["body"] for row in pulled(address, TOPIC, ADMIN)] == [b"signed"]


@pytest.mark.spark
def test_official_producer_messages_read_by_the_spark_source_with_tags_keys_and_properties(broker, topic,
                                                                                          spark):
    sent = [message(topic, f"spark-{i}".encode(), tag=f"T{i % 2}", keys=(f"key-{i}",),
                    properties={"n": str(i)}) for i in range(6)]
    receipts = send_all(broker.address, sent)
    rows = (spark.read.format("rmq").option("endpoints", broker.address).option("topic", topic).load()
            .select("body", "tags", "keys", "properties").collect())
    read = {bytes(row.body): row for row in rows}
    assert sorted(read) == sorted(m.body for m in sent)
    for i, receipt in enumerate(receipts):
        row = read[f"spark-{i}".encode()]
        assert (row.tags, row.keys) == (f"T{i % 2}", f"key-{i}")
        assert row.properties["n"] == str(i) and row.properties["UNIQ_KEY"] == receipt.message_id


def test_route_names_every_broker_of_the_topic_through_the_name_server(tmp_path: Path):
    namesrv = processes.namesrv(tmp_path).start()
    brokers = [processes.broker(tmp_path, name, namesrv_address=namesrv.address).start()
               for name in ("broker-a", "broker-b")]
    try:
        with RmqClient(namesrv.address) as client:
            assert wait_for(lambda: len(client.list_brokers()) == 2, timeout=30)
            client.create_topic(TOPIC, queues=2)
            assert wait_for(lambda: len(client.query_route(TOPIC).brokers) == 2, timeout=30)
        # the client knows broker-a only: the route it gets there names broker-b too
        sent = [message(TOPIC, f"m{i}".encode()) for i in range(8)]
        send_all(brokers[0].address, sent)
        stored = {"broker-a": 0, "broker-b": 0}
        with RmqClient(namesrv.address) as client:
            for mq, offsets in client.topic_offsets(TOPIC).items():
                stored[mq.broker_name] += offsets.max_offset
        assert stored["broker-a"] > 0 and stored["broker-b"] > 0 and sum(stored.values()) == len(sent)
        with started(simple_consumer(brokers[0].address, TOPIC, "g-route")) as consumer:
            received = receive_until(consumer, len(sent), timeout=30)
        assert sorted(m.body for m in received) == sorted(m.body for m in sent)
    finally:
        for server in [*brokers, namesrv]:
            server.stop()
