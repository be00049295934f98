"""Scenario 15 (continued): one broker of two down, the consumers' side. A name server and two
brokers hold a topic (2 queues each) with messages on both. An in-process PushConsumer group and
PullConsumer group (subscribe) read them all; then broker-a is killed -9 (the name server still
routes to it: it evicts a broker only after 120 s; it sorts first, so every per-broker loop
meets it first) and, while it is down, an `rmq consume --group` process starts and a Producer
sends more (to broker-b only, broker-a isolated). All three keep consuming broker-b's
queues and committing their offsets; each names broker-a unreachable in one warning, not one
per failed pull, rebalance or persist. broker-a restarts on its port and store: its old
messages, unread by `rmq consume`, and new ones sent to it are consumed too.

Asserted per group: every acknowledged message is consumed (none lost), those stored on broker-b
exactly once (it never failed), those on broker-a at least once (at-least-once: a kill -9 may
lose offsets the broker had not yet written)."""

from __future__ import annotations

import json
import logging
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from integration_tests.reliability.report import ReliabilityReport, tally
from rmq.connector.client import OutgoingMessage, RmqClient, RmqUnavailable
from rmq.connector.message import Message, MessageExt
from rmq.connector.message_listener import ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus
from rmq.connector.producer import Producer
from rmq.connector.pull_consumer import PullConsumer
from rmq.connector.push_consumer import PushConsumer
from testing import processes
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

TOPIC = "two-brokers-consumed"
PER_BROKER = 10     # old messages stored on each broker before the kill, and new ones on each phase
WAIT_S = 60.0
KILLED, LIVE = "broker-a", "broker-b"     # the killed broker sorts first: it is asked first
UNREACHABLE = f"broker {KILLED} is unreachable"
Read = tuple[str, bytes]    # (broker name, body)


def wait_for(condition: Callable[[], bool], what: Callable[[], str], timeout: float = WAIT_S) -> None:
    wait_until(condition, what, timeout, interval=0.2)


class Group:
    """What one group consumed so far."""

    name: str

    def all(self) -> list[Read]:
        raise NotImplementedError

    def wait_for(self, expected: set[Read]) -> None:
        wait_for(lambda: expected <= set(self.all()),
                 lambda: f"group {self.name} misses {sorted(expected - set(self.all()))[:5]}...")

    def wait_committed(self, client: RmqClient) -> None:
        """Until the group's committed offsets of the live broker's queues are their max offsets
        (asked while the killed broker is down: it is skipped)."""
        def committed() -> bool:
            offsets = client.query_consumer_offsets(self.name, TOPIC, unreachable={})
            ends = client.topic_offsets(TOPIC, unreachable={})
            return all(offsets.get(mq) == end.max_offset for mq, end in ends.items())

        wait_for(committed, lambda: f"group {self.name}'s offsets on {LIVE} not committed")


class Reads(Group):
    """An in-process consumer's reads, thread-safe."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()
        self._reads: list[Read] = []

    def add(self, reads: Sequence[Read]) -> None:
        with self._lock:
            self._reads.extend(reads)

    def all(self) -> list[Read]:
        with self._lock:
            return list(self._reads)


def reads_of(messages: Sequence[MessageExt]) -> list[Read]:
    return [(m.broker_name, m.body) for m in messages]


class ConsumeProcess(Group):
    """`rmq consume TOPIC --group G --from first --json`, its lines in a file."""

    def __init__(self, tmp_path: Path, namesrv: str, group: str) -> None:
        self.name = group
        self.path = tmp_path / f"{group}.jsonl"
        self.err_path = tmp_path / f"{group}.err"
        with open(self.path, "wb") as out, open(self.err_path, "wb") as err:
            self.process = subprocess.Popen(
                processes.RMQ + ["consume", TOPIC, "--group", group, "--from", "first", "--json",
                                 "--endpoints", namesrv], stdout=out, stderr=err)

    def all(self) -> list[Read]:
        lines = self.path.read_text().splitlines()
        records = [json.loads(line) for line in lines if line.endswith("}")]
        return [(r["broker_name"], r["body"].encode()) for r in records]

    def stop(self) -> str:
        self.process.terminate()
        self.process.wait(timeout=WAIT_S)
        return self.err_path.read_text()


class Poller:
    """A PullConsumer polled on a thread until stopped."""

    def __init__(self, consumer: PullConsumer, reads: Reads) -> None:
        self.consumer = consumer
        self.reads = reads
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="poller", daemon=True)

    def _run(self) -> None:
        while not self.stopped.is_set():
            self.reads.add(reads_of(self.consumer.poll(timeout=0.2)))

    def stop(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(timeout=WAIT_S)


def send(client: RmqClient, broker: str, prefix: str) -> set[Read]:
    """PER_BROKER messages to `broker`, retried while the connection to a restarted broker is
    in gRPC's reconnect backoff (refused: nothing stored)."""
    bodies = [f"{prefix}-{n}".encode() for n in range(PER_BROKER)]
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            client.send(TOPIC, [OutgoingMessage(body) for body in bodies], broker_name=broker)
            return {(broker, body) for body in bodies}
        except RmqUnavailable:
            assert time.monotonic() < deadline, f"{broker} not reachable again within {WAIT_S} s"
            time.sleep(0.2)


def killed_broker_warnings(records: Sequence[logging.LogRecord]) -> list[str]:
    """The consumers' warnings naming the killed broker (the producer's are test_broker_down's)."""
    return [r.getMessage() for r in records if r.levelno >= logging.WARNING and KILLED in r.getMessage()
            and r.name != "rmq.connector.producer"]


def test_consumers_keep_reading_the_live_broker_and_pick_the_killed_one_up_again(
        tmp_path: Path, report: ReliabilityReport, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rmq.connector")
    namesrv = processes.namesrv(tmp_path).start()
    brokers = {name: processes.broker(tmp_path, name=name, namesrv_address=namesrv.address).start()
               for name in (KILLED, LIVE)}
    push_reads, pull_reads = Reads("push-group"), Reads("pull-group")

    def listener(messages: Sequence[MessageExt], context: ConsumeConcurrentlyContext
                 ) -> ConsumeConcurrentlyStatus:
        push_reads.add(reads_of(messages))
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    push = PushConsumer(push_reads.name, namesrv.address, consume_from="first")
    push.subscribe(TOPIC)
    push.register_message_listener(listener)
    pull = PullConsumer(pull_reads.name, namesrv.address, consume_from="first", auto_commit_interval_s=1.0)
    pull.subscribe(TOPIC)
    poller = Poller(pull, pull_reads)
    producer = Producer(namesrv.address)
    cli: ConsumeProcess | None = None
    client = RmqClient(namesrv.address)
    try:
        wait_for(lambda: len(client.list_brokers()) == 2, lambda: "both brokers registered")
        client.create_topic(TOPIC, queues=2)
        wait_for(lambda: len(client.query_route(TOPIC).brokers) == 2, lambda: "the topic routed on both")
        old = send(client, KILLED, "old-killed") | send(client, LIVE, "old-live")
        push.start()
        pull.start()
        poller.thread.start()
        push_reads.wait_for(old)      # both pull from both brokers when one is killed
        pull_reads.wait_for(old)

        brokers[KILLED].kill()
        killed_at = time.monotonic()
        cli = ConsumeProcess(tmp_path, namesrv.address, "cli-group")
        producer.start()
        down = {(LIVE, f"down-{n}".encode()) for n in range(PER_BROKER)}
        results = [producer.send(Message(TOPIC, body)) for _, body in sorted(down)]
        assert {r.message_queue.broker_name for r in results} == {LIVE}
        old_live = {read for read in old if read[0] == LIVE}
        push_reads.wait_for(down)
        pull_reads.wait_for(down)
        cli.wait_for(old_live | down)
        for group in (push_reads, pull_reads, cli):     # persisting is not held up by the killed broker
            group.wait_committed(client)
        down_s = time.monotonic() - killed_at

        brokers[KILLED].start()
        back = send(client, KILLED, "back")
        push_reads.wait_for(back)
        pull_reads.wait_for(back)
        cli.wait_for(old | down | back)
    finally:
        producer.shutdown()
        poller.stop()
        pull.shutdown()
        push.shutdown()
        cli_stderr = cli.stop() if cli is not None else ""
        client.close()
        for server in (*brokers.values(), namesrv):
            server.stop()

    assert cli is not None
    acknowledged = old | down | back
    in_process_warnings = killed_broker_warnings(caplog.records)
    cli_warnings = [line for line in cli_stderr.splitlines() if KILLED in line]
    for group in (push_reads, pull_reads, cli):
        counts = Counter(group.all())
        figures = report.record(tally(
            f"15 one broker of two killed -9: consumer group {group.name}", len(acknowledged),
            acknowledged, group.all(),
            notes=f"{KILLED} down {down_s:.1f} s: {LIVE}'s messages read and committed meanwhile, "
                  f"{KILLED}'s after its return; {len(in_process_warnings)} in-process warnings and "
                  f"{len(cli_warnings)} rmq consume warnings named {KILLED}"))
        assert figures.lost == 0, group.name
        assert all(counts[read] == 1 for read in acknowledged if read[0] == LIVE), group.name
    assert "Traceback" not in cli_stderr, cli_stderr
    assert sum(UNREACHABLE in line for line in cli_warnings) == 1, cli_stderr
    assert len(cli_warnings) <= 2, cli_stderr     # the unreachable one, perhaps a failed heartbeat
    # one each from the PushConsumer and the PullConsumer, not one per failed pull / rebalance / persist
    assert sum(UNREACHABLE in line for line in in_process_warnings) == 2, in_process_warnings
    assert len(in_process_warnings) <= 4, in_process_warnings
