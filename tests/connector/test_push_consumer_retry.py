"""PushConsumer against a whole broker (in this process, over gRPC) with short delay levels:
failed messages come back through the retry topic at the delay levels with growing
reconsume_times and end in the DLQ intact; `rmq dlq list/resend` show and re-publish them;
raising, returning None and running past the consume timeout are retried; flow control bounds
a slow listener's ProcessQueue; broadcasting consumers each get everything and resume from
their local offset files."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from rmq import retry
from rmq.cli.main import main as cli_main
from rmq.connector import ConsumeConcurrentlyStatus, Message, MessageExt, Producer, PushConsumer
from rmq.connector.client import RmqClient
from rmq.connector.message_listener import ConsumeConcurrentlyContext
from rmq.subscription import MessageSelector
from tests.broker_server.in_process_broker import InProcessBroker, running_broker
from tests.waiting import wait_until

GROUP = "g-retry"
WAIT_S = 30.0
OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    """One whole broker in this process for the module (each test has its own topic and group),
    every retry level waiting 1 s."""
    with running_broker(tmp_path_factory.mktemp("push-retry"), flush="sync",
                        message_delay_level="1s 1s 1s 1s 1s") as server:
        with RmqClient(server.address) as client:
            for topic, queues in (("T", 2), ("Slow", 1), ("Bc", 2), ("Sql", 2)):
                client.create_topic(topic, queues)
        yield server


def rmq_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`rmq ARGS` run in this process (the CLI's main, output captured): no interpreter start-up."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(args))
    return subprocess.CompletedProcess(["rmq", *args], code, out.getvalue(), err.getvalue())


class Recorder:
    """The listener of the retry test: what each body did, attempt by attempt."""

    def __init__(self) -> None:
        self.seen: dict[bytes, list[tuple[int, str, float]]] = defaultdict(list)
        self.lock = threading.Lock()
        self.fail_forever = True

    def __call__(self, messages: Sequence[MessageExt], context: ConsumeConcurrentlyContext):
        message = messages[0]
        with self.lock:
            self.seen[message.body].append((message.reconsume_times, message.topic, time.monotonic()))
        first_attempt = message.reconsume_times == 0
        if message.body == b"fail" and self.fail_forever:
            return LATER
        if message.body == b"raise" and first_attempt:
            raise RuntimeError("listener failure")
        if message.body == b"none" and first_attempt:
            return None
        if message.body == b"sleep" and first_attempt:
            time.sleep(3.0)  # the behaviour under test: a listener running past the 1.2 s consume timeout
        return OK

    def attempts(self, body: bytes) -> list[int]:
        with self.lock:
            return [times for times, _, _ in self.seen[body]]


def test_retry_levels_dlq_and_resend(broker: InProcessBroker) -> None:
    recorder = Recorder()
    consumer = PushConsumer(
        GROUP, broker.address, consume_from="first", max_reconsume_times=3, consume_timeout_minutes=0.02
    )
    consumer.subscribe("T")
    consumer.register_message_listener(recorder)
    failing = Message("T", b"fail", tags="TagF", keys=["k1", "k2"], properties={"p": "v"})
    with Producer(broker.address) as producer, consumer:
        producer.send(
            [failing, Message("T", b"raise"), Message("T", b"none"), Message("T", b"sleep")]
            + [Message("T", f"ok{i}".encode()) for i in range(20)]
        )
        wait_until(lambda: recorder.attempts(b"fail") == [0, 1, 2, 3] and dead_letters(broker), "the DLQ")
        wait_until(
            lambda: all(recorder.attempts(b) == [0, 1] for b in (b"raise", b"none", b"sleep")),
            "the retries of raise / none / sleep",
        )
        # every retry arrives with the original topic, one delay level (1 s) after the previous attempt
        times = [at for _, _, at in recorder.seen[b"fail"]]
        assert {topic for _, topic, _ in recorder.seen[b"fail"]} == {"T"}
        assert all(0.9 <= later - earlier < 5 for earlier, later in itertools.pairwise(times))
        [letter] = dead_letters(broker)
        assert letter["body"] == "fail" and letter["topic"] == "T" and letter["tags"] == "TagF"
        assert letter["keys"] == "k1 k2" and letter["properties"]["p"] == "v"
        assert letter["properties"][retry.PROPERTY_RETRY_TOPIC] == "T"
        assert letter["reconsume_times"] == 4 and not letter["resent"]

        progress = json.loads(
            rmq_cli(
                "group", "progress", GROUP, "--topic", "T", "--json", "--endpoints", broker.address
            ).stdout
        )
        assert "%RETRY%g-retry" in {row["topic"] for row in progress["queues"]}

        recorder.fail_forever = False
        resent = rmq_cli("dlq", "resend", GROUP, "--endpoints", broker.address)
        assert resent.returncode == 0 and "resent 1 dead letters" in resent.stdout
        wait_until(lambda: recorder.attempts(b"fail") == [0, 1, 2, 3, 0], "the resent message")
        assert rmq_cli("dlq", "resend", GROUP, "--endpoints", broker.address).stdout.startswith("resent 0")
        [letter] = dead_letters(broker)
        assert letter["resent"]
        unknown = rmq_cli("dlq", "resend", GROUP, "--msg-id", "NOPE", "--endpoints", broker.address)
        assert unknown.returncode == 2 and "no dead letter of group g-retry has id NOPE" in unknown.stderr
        by_id = rmq_cli(
            "dlq", "resend", GROUP, "--msg-id", letter["origin_msg_id"], "--endpoints", broker.address
        )
        assert by_id.stdout.startswith("resent 1")  # by id: even when resent before
        wait_until(lambda: recorder.attempts(b"fail") == [0, 1, 2, 3, 0, 0], "the message resent by id")
        time.sleep(0.5)   # an absence window, not an event: a repeat would show within it
        assert all(recorder.attempts(f"ok{i}".encode()) == [0] for i in range(20))  # nothing else repeats
        assert recorder.attempts(b"fail") == [0, 1, 2, 3, 0, 0]


def dead_letters(broker: InProcessBroker) -> list[dict]:
    listed = rmq_cli("dlq", "list", GROUP, "--json", "--endpoints", broker.address)
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


def test_flow_control_bounds_a_slow_listeners_process_queue(broker: InProcessBroker) -> None:
    with Producer(broker.address) as producer:
        producer.send([Message("Slow", b"x") for _ in range(120)])
    consumed = []

    def slow(messages: Sequence[MessageExt], context: ConsumeConcurrentlyContext):
        time.sleep(0.005)   # the behaviour under test: a slow listener
        consumed.extend(messages)
        return OK

    consumer = PushConsumer(
        "g-slow",
        broker.address,
        consume_from="first",
        consume_thread_max=1,
        pull_batch_size=4,
        pull_threshold_for_queue=10,
    )
    consumer.subscribe("Slow")
    consumer.register_message_listener(slow)
    held = []
    with consumer:
        deadline = time.monotonic() + WAIT_S
        while len(consumed) < 120 and time.monotonic() < deadline:
            held.extend(consumer.process_queues().values())
            time.sleep(0.002)   # sampling the ProcessQueue sizes while the listener works
    assert len(consumed) == 120
    assert 10 < max(held) <= 10 + 4  # pulls stop once more than 10 are held (TV-7)


def test_broadcasting_each_gets_everything_and_resumes(
    broker: InProcessBroker, tmp_path: Path
) -> None:
    received: dict[str, list[bytes]] = defaultdict(list)

    def consumer(name: str) -> PushConsumer:
        c = PushConsumer(
            "g-bc",
            broker.address,
            message_model="broadcasting",
            consume_from="first",
            instance_name=name,
            offset_store_dir=tmp_path / "offsets",
        )
        c.subscribe("Bc")
        c.register_message_listener(lambda msgs, ctx: received[name].extend(m.body for m in msgs) or OK)
        return c

    with Producer(broker.address) as producer:
        producer.send([Message("Bc", f"a{i}".encode()) for i in range(30)])
        first, second = consumer("b1"), consumer("b2")
        first.start()
        second.start()
        wait_until(lambda: len(received["b1"]) == 30 and len(received["b2"]) == 30, "both got all 30")
        first.shutdown()
        files = list((tmp_path / "offsets").glob("*b1/g-bc/offsets.json"))
        assert len(files) == 1
        saved = json.loads(files[0].read_text())
        assert sum(saved["Bc"]["broker-a"].values()) == 30
        producer.send([Message("Bc", f"b{i}".encode()) for i in range(10)])
        wait_until(lambda: len(received["b2"]) == 40, "b2 got the 10 new ones")
        restarted = consumer("b1")
        with restarted:
            wait_until(lambda: len(received["b1"]) == 40, "b1 resumed")
            time.sleep(0.3)   # an absence window, not an event: a message read twice would show within it
        second.shutdown()
    assert sorted(received["b1"]) == sorted(received["b2"])
    assert len(set(received["b1"])) == 40


def test_sql92_subscription_gets_only_matching_messages(broker: InProcessBroker) -> None:
    got: list[bytes] = []
    consumer = PushConsumer("g-sql", broker.address, consume_from="first")
    consumer.subscribe("Sql", MessageSelector.by_sql("region = 'eu' AND amount > 100"))
    consumer.register_message_listener(lambda msgs, ctx: got.extend(m.body for m in msgs) or OK)
    with Producer(broker.address) as producer, consumer:
        producer.send(
            [
                Message(
                    "Sql", f"{region}-{amount}".encode(), properties={"region": region, "amount": str(amount)}
                )
                for region in ("eu", "us")
                for amount in (50, 150, 250)
            ]
        )
        wait_until(lambda: len(got) == 2, "the two matching messages")
        time.sleep(0.3)   # an absence window, not an event: a message the filter let through would show
    assert sorted(got) == [b"eu-150", b"eu-250"]


MEMBER_SCRIPT = """
import sys, time
from rmq.connector.client import RmqClient
from rmq.connector.spark.membership import ConsumerMembership
member = ConsumerMembership(RmqClient(sys.argv[1]), "g-spark", "spark-query-1", {"T": "*"},
                            broadcasting=False, strategy="avg")
member.start()
print("ready", flush=True)
time.sleep(600)   # a live member until the test kills it
"""


def test_a_killed_spark_query_leaves_its_group_at_once(tmp_path: Path) -> None:
    """The Spark source's membership holds a watch stream: kill -9 of its driver unregisters it
    (without the stream the broker would list it until the 120 s client expiry)."""
    broker = InProcessBroker(tmp_path / "store").start()   # its watch table can be looked at
    process = None
    try:
        with RmqClient(broker.address) as client:
            client.create_topic("T", 2)
            process = subprocess.Popen(
                [sys.executable, "-c", MEMBER_SCRIPT, broker.address], stdout=subprocess.PIPE, text=True
            )
            assert process.stdout.readline().strip() == "ready"
            wait_until(
                lambda: client.consumer_list("g-spark", "T") == ["spark-query-1"], "the query registered"
            )
            wait_until(lambda: broker.controller.watches.watcher_count() == 1, "its watch stream is open")
            process.kill()
            process.wait()
            wait_until(lambda: client.consumer_list("g-spark", "T") == [], "the killed query gone", timeout=5)
    finally:
        if process is not None:
            process.kill()
            process.wait()
        broker.stop()
