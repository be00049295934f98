"""Orderly consumption against a real broker (spec consumer-pull-rebalance §17, TV-21;
consumer-startup-allocation-ordering §5, §6).

Keyed messages (order id -> queue by hash, TV-21) consumed by orderly consumers in their own
processes, one added and one killed -9 during the run: every listener call is recorded as
(queue, offset, pid, start, end); no queue is ever processed by two consumers at once, and
for every key the processed sequence is strictly increasing with no gaps (the killed
consumer's uncommitted tail, processed again by its successor, aside). In-process: a
suspended message comes again in order, and with `max_reconsume_times` it lands in the DLQ
while the queue goes on.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from rmq import retry
from rmq.connector import (
    ConsumeOrderlyContext,
    ConsumeOrderlyStatus,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
)
from rmq.connector.client import MessageQueue, PullStatus, RmqClient
from rmq.connector.message import decode_messages
from rmq.connector.producer import select_message_queue_by_hash
from testing import processes
from tests.waiting import wait_until

pytestmark = pytest.mark.integration
TOPIC = "Ordered"
KEYS = 24
MAX_STEPS = 300       # the producer stops earlier: once the join and the kill have happened
WAIT_S = 60.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[processes.ServerProcess]:
    server = processes.broker(tmp_path_factory.mktemp("orderly")).start()
    yield server
    server.stop()


def start_consumer(broker: processes.ServerProcess, out: Path, name: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "integration_tests.orderly_consumer_process",
                             broker.address, "orderly", TOPIC, str(out), name])


class KeyedProducer(threading.Thread):
    """Step s of every order id, then step s + 1 (TV-21: same key, same queue), every 0.2 s
    until told to stop; `steps` is how many it sent."""

    def __init__(self, endpoints: str) -> None:
        super().__init__()
        self.endpoints = endpoints
        self.stop = threading.Event()
        self.steps = 0

    def run(self) -> None:
        with Producer(self.endpoints) as producer:
            while self.steps < MAX_STEPS and not self.stop.is_set():
                send_step(producer, TOPIC, self.steps)
                self.steps += 1
                time.sleep(0.2)   # the behaviour under test: a steady producer, a step every 0.2 s


def send_step(producer: Producer, topic: str, step: int) -> None:
    """Step `step` of every order id, each to its key's queue (TV-21)."""
    for key in range(KEYS):
        producer.send(Message(topic, f"{key}:{step}".encode(), keys=f"order-{key}"),
                      select_message_queue_by_hash, f"order-{key}")


def records(out: Path) -> list[list]:
    if not out.exists():
        return []
    return [json.loads(line) for line in out.read_text().splitlines() if line.endswith("]")]


def wait_until_consumed_by(consumer: subprocess.Popen[bytes], out: Path) -> None:
    """Until `consumer` processed a message (it started, joined the group and locked a queue)."""
    deadline = time.monotonic() + WAIT_S
    while consumer.pid not in {r[3] for r in records(out)}:
        assert consumer.poll() is None, f"consumer {consumer.args} exited with {consumer.returncode}"
        assert time.monotonic() < deadline, f"consumer {consumer.pid} consumed nothing in {WAIT_S} s"
        time.sleep(0.2)


def test_keyed_orders_with_a_join_and_a_kill(broker: processes.ServerProcess, tmp_path: Path) -> None:
    with RmqClient(broker.address) as client:
        client.create_topic(TOPIC, 8)
    out = tmp_path / "processed.jsonl"
    consumers = [start_consumer(broker, out, f"c{i}") for i in range(2)]
    producer = KeyedProducer(broker.address)
    producer.start()
    try:
        for consumer in consumers:
            wait_until_consumed_by(consumer, out)
        consumers.append(start_consumer(broker, out, "c2"))     # joins during the run
        wait_until_consumed_by(consumers[-1], out)
        killed = consumers.pop(0)
        killed.kill()                                           # kill -9 while consuming
        killed.wait()
        steps_at_kill = producer.steps                          # production goes on a while
        wait_until(lambda: producer.steps >= steps_at_kill + 5, "5 more steps produced", timeout=WAIT_S)
        producer.stop.set()
        producer.join()
        expected = {f"{key}:{step}" for key in range(KEYS) for step in range(producer.steps)}
        deadline = time.monotonic() + WAIT_S
        while {r[7] for r in records(out)} != expected:
            missing = expected - {r[7] for r in records(out)}
            assert time.monotonic() < deadline, f"{len(missing)} not processed"
            time.sleep(0.2)
    finally:
        producer.stop.set()
        producer.join()
        for consumer in consumers:
            consumer.send_signal(signal.SIGTERM)
        for consumer in consumers:
            assert consumer.wait(WAIT_S) == 0
    done = records(out)
    assert_no_queue_processed_twice_at_once(done)
    assert_each_key_in_order(done, killed.pid, producer.steps)


def produce_steps(endpoints: str, topic: str, steps: range) -> None:
    with Producer(endpoints) as producer:
        for step in steps:
            send_step(producer, topic, step)


def wait_for_all(out: Path, expected: set[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not expected <= {r[7] for r in records(out)}:
        missing = expected - {r[7] for r in records(out)}
        assert time.monotonic() < deadline, f"{len(missing)} not processed, e.g. {sorted(missing)[:3]}"
        time.sleep(0.2)


def test_keyed_orders_across_a_broker_restart(tmp_path: Path) -> None:
    """The broker restarts under two orderly consumers: their watch streams end (each unlocks
    its queues at once, so neither consumes a queue the other may take meanwhile), then each
    takes its locks back as soon as the broker answers and goes on where it was."""
    broker = processes.broker(tmp_path).start()
    out = tmp_path / "processed.jsonl"
    consumers: list[subprocess.Popen[bytes]] = []
    try:
        with RmqClient(broker.address) as client:
            client.create_topic(TOPIC, 8)
        consumers = [start_consumer(broker, out, f"c{i}") for i in range(2)]
        # steps go on until each consumer processed one: a consumer that joins the group after the
        # other consumed every step sent so far gets its queues with nothing left on them
        producer = KeyedProducer(broker.address)
        producer.start()
        try:
            for consumer in consumers:
                wait_until_consumed_by(consumer, out)
        finally:
            producer.stop.set()
            producer.join()
        before = producer.steps
        wait_for_all(out, {f"{key}:{step}" for key in range(KEYS) for step in range(before)})
        broker.restart()
        restarted = time.time()
        produce_steps(broker.address, TOPIC, range(before, before + 5))
        wait_for_all(out, {f"{key}:{step}" for key in range(KEYS) for step in range(before + 5)})
    finally:
        for consumer in consumers:
            consumer.send_signal(signal.SIGTERM)
        for consumer in consumers:
            assert consumer.wait(WAIT_S) == 0
        broker.stop()
    done = records(out)
    assert_no_queue_processed_twice_at_once(done)
    assert_each_key_in_order(done, killed_pid=-1, steps_sent=before + 5)
    after = [r for r in done if r[4] >= restarted]
    assert {r[3] for r in after} == {c.pid for c in consumers}      # both went on after the restart


def assert_no_queue_processed_twice_at_once(done: list[list]) -> None:
    by_queue: dict[tuple[str, int], list[list]] = defaultdict(list)
    for record in done:
        by_queue[(record[0], record[1])].append(record)
    for queue, calls in by_queue.items():
        calls.sort(key=lambda r: r[4])
        for before, after in zip(calls, calls[1:], strict=False):
            assert after[4] >= before[5], f"queue {queue}: {before} and {after} overlap"


def assert_each_key_in_order(done: list[list], killed_pid: int, steps_sent: int) -> None:
    later_by_others = {(r[0], r[1], r[2]) for r in done if r[3] != killed_pid}
    kept = [r for r in done if r[3] != killed_pid or (r[0], r[1], r[2]) not in later_by_others]
    steps: dict[str, list[int]] = defaultdict(list)
    for record in sorted(kept, key=lambda r: r[4]):
        key, step = record[7].split(":")
        steps[key].append(int(step))
    assert set(steps) == {str(k) for k in range(KEYS)}
    for key, sequence in steps.items():
        assert sequence == list(range(steps_sent)), f"order {key}: {sequence}"


def test_suspend_redelivers_in_order_then_the_dlq(broker: processes.ServerProcess) -> None:
    topic, group = "Suspended", "suspender"
    seen: list[tuple[int, float]] = []
    with RmqClient(broker.address) as client:
        client.create_topic(topic, 1)
        with Producer(broker.address) as producer:
            producer.send([Message(topic, f"m{i}".encode()) for i in range(5)])

        def listener(messages: Sequence[MessageExt], context: ConsumeOrderlyContext) -> ConsumeOrderlyStatus:
            seen.extend((m.queue_offset, time.monotonic()) for m in messages)
            if messages[0].body == b"m2":
                context.suspend_current_queue_time_millis = 300
                return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            return ConsumeOrderlyStatus.SUCCESS

        consumer = PushConsumer(group, broker.address, consume_from="first", max_reconsume_times=2,
                                persist_consumer_offset_interval_s=0.2)
        consumer.subscribe(topic)
        consumer.register_message_listener(listener, orderly=True)
        mq = MessageQueue(topic, "broker-a", 0)
        with consumer:
            deadline = time.monotonic() + WAIT_S
            while client.query_consumer_offsets(group, topic).get(mq) != 5:
                assert time.monotonic() < deadline, seen
                time.sleep(0.1)
        assert [offset for offset, _ in seen] == [0, 1, 2, 2, 2, 3, 4]   # 1 + 2 reconsumes, then on
        again = [at for offset, at in seen if offset == 2]
        assert all(b - a >= 0.3 for a, b in zip(again, again[1:], strict=False))   # the suspend time
        dlq = MessageQueue(retry.dlq_topic(group), "broker-a", 0)
        result = client.browse_messages(dlq, 0, 10)
        assert result.pull_status == PullStatus.FOUND
        assert [m.body for m in decode_messages(result.messages, dlq)] == [b"m2"]
