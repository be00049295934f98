"""PushConsumers in their own processes against a name server and two brokers: the group
splits an 8-queue topic per `avg` / `circle`, every message is consumed once, a consumer
killed with kill -9 hands its queues over (duplicates only from its uncommitted progress),
and a clean shutdown makes the others rebalance at once (membership push)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rmq.connector import Message, Producer
from rmq.connector.allocation import allocate
from rmq.connector.client import MessageQueue, RmqClient, RmqError
from rmq.v1 import rmq_pb2
from testing import processes

TOPIC = "Orders"
QUEUES_PER_BROKER = 4
WAIT_S = 30.0


@dataclass
class Cluster:
    namesrv: processes.ServerProcess
    brokers: list[processes.ServerProcess]

    @property
    def endpoints(self) -> str:
        return self.namesrv.address


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    path = tmp_path_factory.mktemp("push-cluster")
    namesrv = processes.namesrv(path).start()
    brokers = [
        processes.broker(path, name, namesrv.address, flush="async").start()
        for name in ("broker-a", "broker-b")
    ]
    try:
        with RmqClient(namesrv.address) as client:
            wait_until(lambda: len(client.list_brokers()) == 2, "both brokers registered")
            client.create_topic(TOPIC, QUEUES_PER_BROKER)
            wait_until(lambda: len(client.query_route(TOPIC).message_queues) == 8, "the route has 8 queues")
        yield Cluster(namesrv, brokers)
    finally:
        for server in brokers + [namesrv]:
            server.stop()


def wait_until(condition, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except Exception:  # e.g. the route is not there yet
            pass
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class ConsumerProcess:
    def __init__(self, cluster: Cluster, group: str, strategy: str, out: Path, name: str) -> None:
        self.out, self.name = out, name
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "integration_tests.push_consumer_process",
                cluster.endpoints,
                group,
                TOPIC,
                strategy,
                str(out),
                name,
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(out / f"{name}.log", "wb"),
        )

    def client_id(self) -> str:
        path = self.out / f"{self.name}.owned"
        return path.read_text().splitlines()[0] if path.exists() and path.read_text() else ""

    def owned(self) -> tuple[float, set[MessageQueue]]:
        """The last ownership change: when, and the queues."""
        lines = (self.out / f"{self.name}.owned").read_text().splitlines()[1:]
        if not lines:
            return 0.0, set()
        at, queues = json.loads(lines[-1])
        return at, {MessageQueue(TOPIC, broker, queue_id) for broker, queue_id in queues}

    def consumed(self) -> list[tuple[str, int, int, str]]:
        path = self.out / f"{self.name}.consumed"
        if not path.exists():
            return []
        return [tuple(json.loads(line)) for line in path.read_text().splitlines() if line.endswith("]")]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(WAIT_S)


def expected_allocation(
    strategy: str, consumers: list[ConsumerProcess], mqs: list[MessageQueue]
) -> dict[str, set[MessageQueue]]:
    cids = [c.client_id() for c in consumers]
    return {c.name: set(allocate(strategy, c.client_id(), mqs, cids)) for c in consumers}


def produce(cluster: Cluster, first: int, count: int) -> None:
    with Producer(cluster.endpoints) as producer:
        producer.send([Message(TOPIC, f"m{i}".encode()) for i in range(first, first + count)])


def bodies(consumers: list[ConsumerProcess]) -> Counter[str]:
    return Counter(record[3] for c in consumers for record in c.consumed())


def start_group(
    cluster: Cluster, group: str, strategy: str, out: Path
) -> tuple[list[ConsumerProcess], list[MessageQueue]]:
    consumers = [ConsumerProcess(cluster, group, strategy, out, name) for name in ("c1", "c2", "c3")]
    with RmqClient(cluster.endpoints) as client:
        mqs = list(client.query_route(TOPIC).message_queues)
    wait_until(lambda: all(c.client_id() for c in consumers), "consumers started")
    expected = expected_allocation(strategy, consumers, mqs)
    wait_until(lambda: {c.name: c.owned()[1] for c in consumers} == expected, f"the {strategy} split")
    return consumers, mqs


def test_avg_split_kill_9_and_clean_shutdown(cluster: Cluster, tmp_path: Path) -> None:
    consumers, mqs = start_group(cluster, "g-avg", "avg", tmp_path)
    c1, c2, c3 = consumers
    try:
        assert [len(c.owned()[1]) for c in consumers] == [3, 3, 2]  # TV-1
        produce(cluster, 0, 300)
        wait_until(lambda: len(bodies(consumers)) == 300, "300 messages consumed")
        time.sleep(0.3)   # an absence window, not an event: a message consumed twice would show
        assert set(bodies(consumers).values()) == {1}  # each exactly once

        # kill -9: the broker sees the watch stream break, unregisters c2, the others take over
        _, killed_queues = c2.owned()
        killed_at = time.time()
        c2.process.kill()
        c2.process.wait()
        survivors = [c1, c3]
        wait_until(lambda: c1.owned()[1] | c3.owned()[1] == set(mqs), "c2's queues taken over")
        taken_over = max(c1.owned()[0], c3.owned()[0]) - killed_at
        assert not c1.owned()[1] & c3.owned()[1]
        produce(cluster, 300, 300)
        wait_until(lambda: len(bodies(consumers)) == 600, "600 messages consumed")
        time.sleep(0.3)   # an absence window, not an event: a further duplicate would show
        counts = bodies(consumers)
        duplicated = {body for body, n in counts.items() if n > 1}
        assert all(n <= 2 for n in counts.values())
        by_body = {record[3]: (record[0], record[1]) for c in survivors for record in c.consumed()}
        # only messages of the killed consumer's queues, consumed but not yet committed, come twice
        assert all(MessageQueue(TOPIC, *by_body[body]) in killed_queues for body in duplicated)
        print(f"\nkill -9: queues taken over {taken_over * 1000:.0f} ms later, "
              f"{len(duplicated)} duplicates of 600 messages")

        # clean shutdown: c3 unregisters; c1 owns everything within about a second
        sent_at = time.time()
        c3.stop()
        wait_until(lambda: c1.owned()[1] == set(mqs), "c1 owns every queue")
        took = c1.owned()[0] - sent_at
        after_return = c1.owned()[0] - float((tmp_path / "c3.stopped").read_text())
        print(f"clean shutdown -> rebalance: {took * 1000:.0f} ms after SIGTERM, "
              f"{after_return * 1000:.0f} ms after shutdown() returned")
        assert took < 3.0  # loosely: the periodic rebalance alone would take up to 20 s
        produce(cluster, 600, 50)
        wait_until(lambda: len(bodies(consumers)) == 650, "650 messages consumed")
    finally:
        for consumer in consumers:
            consumer.stop()


def test_circle_split(cluster: Cluster, tmp_path: Path) -> None:
    with RmqClient(cluster.endpoints) as client:  # the group starts at the end (no churn over history)
        client.update_consumer_offsets(
            "g-circle", {mq: bounds.max_offset for mq, bounds in client.topic_offsets(TOPIC).items()}
        )
    consumers, _ = start_group(cluster, "g-circle", "circle", tmp_path)
    try:
        produce(cluster, 10000, 100)
        wait_until(lambda: len(bodies(consumers)) == 100, "100 messages consumed")
        time.sleep(0.2)   # an absence window, not an event: a message consumed twice would show
        assert set(bodies(consumers).values()) == {1}
    finally:
        for consumer in consumers:
            consumer.stop()


def test_producer_refuses_unknown_topics_whole_and_fails_over_to_the_other_broker(cluster: Cluster) -> None:
    """Runs last in this module: it stops broker-b."""
    with Producer(cluster.endpoints) as producer, RmqClient(cluster.endpoints) as client:
        before = client.topic_offsets(TOPIC)
        with pytest.raises(RmqError) as refused:
            producer.send([Message(TOPIC, b"fine"), Message("NoSuchTopic", b"x")])
        assert refused.value.code == rmq_pb2.TOPIC_NOT_EXIST
        assert client.topic_offsets(TOPIC) == before   # nothing of the list was sent
        producer.send(Message(TOPIC, b"warm-up"))      # the route (both brokers) is now cached
        cluster.brokers[1].stop()
        results = [producer.send(Message(TOPIC, f"f{i}".encode())) for i in range(10)]
    assert {r.message_queue.broker_name for r in results} == {"broker-a"}
    assert all(r.queue_offset >= 0 for r in results)
