"""A cluster with a broker that is down: a name server (process), broker-a running in the test
process, and broker-b registered with the name server for some topics at an address where
nothing listens (as after a kill -9, before the name server expires it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc

from rmq.connector.client import RmqClient, RmqError
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from testing import processes
from tests.broker_server.in_process_broker import InProcessBroker
from tests.waiting import wait_until

DEAD_BROKER = "broker-b"


def closed_address() -> str:
    return f"127.0.0.1:{processes.free_port()}"


@contextmanager
def name_server_and_broker_a(tmp_path: Path) -> Iterator[tuple[str, RmqClient]]:
    """(name server address, a client through it) once broker-a is registered."""
    namesrv = processes.namesrv(tmp_path).start()
    broker_a = InProcessBroker(tmp_path / "store", namesrv=namesrv.address).start()
    try:
        with RmqClient(namesrv.address) as client:
            wait_until(lambda: client.list_brokers() == {"broker-a": broker_a.address}, "broker-a registered")
            yield namesrv.address, client
    finally:
        broker_a.stop()
        namesrv.stop()


def create_topic(client: RmqClient, topic: str, queues: int) -> None:
    """Create `topic` on broker-a and wait until the name server routes it."""
    client.create_topic(topic, queues=queues)

    def routed() -> bool:
        try:
            return bool(client.query_route(topic).message_queues)
        except RmqError:
            return False

    wait_until(routed, f"the name server routes {topic}")


def register_dead_broker(namesrv_address: str, topics: list[str]) -> None:
    """broker-b holds `topics` (one queue each) according to the name server, and is down."""
    dead = rmq_pb2.BrokerData(broker_name=DEAD_BROKER, address=closed_address())
    configs = [rmq_pb2.TopicConfig(topic_name=topic, read_queue_nums=1, write_queue_nums=1, perm=6)
               for topic in topics]
    with grpc.insecure_channel(namesrv_address) as channel:
        response = rmq_pb2_grpc.NameServerServiceStub(channel).RegisterBroker(
            rmq_pb2.RegisterBrokerRequest(broker=dead, topics=configs), timeout=10)
    assert response.status.code == rmq_pb2.OK
