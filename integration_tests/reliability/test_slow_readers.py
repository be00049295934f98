"""Scenario 17: slow readers that never read their responses. A separate process opens many
large PullMessage calls over two connections and SIGSTOPs itself at its first answer: its socket
fills and every answer the broker built for it stays inside the broker until the call ends. Meanwhile one
producer sends one message at a time and one consumer keeps pulling 2 MiB batches of the same
large topic. The broker bounds what it holds for unread answers (max_inflight_pull_bytes_per_connection,
max_inflight_pull_bytes: lowered here): its RSS grows by less than RSS_BOUND_MIB (the unbounded
broker grew by ~3x READER_PULLS x PULL_MIB), the well-behaved calls all succeed, and once the
stopped process is killed -9 the bytes held for it drop to 0 and RSS stops growing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from integration_tests.reliability.brokers import configured_broker
from integration_tests.reliability.report import ReliabilityReport, tally
from integration_tests.reliability.resource_samples import ResourceSampler, by_figure
from integration_tests.reliability.traffic import Producers, read_topic
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.connector.errors import RmqError
from rmq.message_queue import MessageQueue
from testing import processes
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

MiB = 1 << 20
TOPIC, PRODUCED = "slow-readers", "slow-readers-producer"
QUEUES = 4
BODY = 256 << 10
QUEUE_MIB = 8                         # data per queue: 32 MiB on disk
PULL_MIB = 8                          # each unread pull asks for a whole queue
READER_CONNECTIONS, READER_PULLS = 2, 32
CONNECTION_BUDGET, BUDGET = 8 * MiB, 32 * MiB
# Without --acl a client's account is its address, so every client here (all on loopback) is one
# account: its share is the whole budget in this run, which is about the total and the
# per-connection bound (the per-account share has its own tests in tests/broker_server).
SETTINGS = dict(max_inflight_pull_bytes_per_connection=CONNECTION_BUDGET, max_inflight_pull_bytes=BUDGET,
                max_inflight_pull_bytes_per_account=BUDGET)
RSS_BOUND_MIB = 256                   # unbounded: READER_PULLS x PULL_MIB = 256 MiB of answers, ~3x in RSS
GOOD_PULL_BYTES = 2 * MiB
WINDOW = (100, 10)     # sends, good pulls: each phase (before, while the reader is stopped, after) lasts this

# Opens READER_PULLS pulls at once over READER_CONNECTIONS channels and stops itself (SIGSTOP) as
# soon as the first answer arrives: every request is on the wire, the other answers are never read.
SLOW_READER = textwrap.dedent("""
    import os, signal, sys, time, grpc
    from rmq.v1 import rmq_pb2, rmq_pb2_grpc
    address, connections, count, max_bytes, topic, queues = sys.argv[1], *map(int, sys.argv[2:5]), \\
        sys.argv[5], int(sys.argv[6])
    options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.use_local_subchannel_pool", 1)]
    stubs = [rmq_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(address, options=options))
             for _ in range(connections)]
    futures = [stubs[n % connections].PullMessage.future(rmq_pb2.PullMessageRequest(
        consumer_group="slow-reader", topic=topic, queue_id=n % queues, max_messages=100000,
        max_bytes=max_bytes, sub_expression="*"), timeout=600) for n in range(count)]
    print("sent", flush=True)
    for future in futures:
        future.add_done_callback(lambda _: os.kill(os.getpid(), signal.SIGSTOP))
    time.sleep(600)   # stopped or killed by then
""")


@dataclass
class GoodConsumer:
    """Pulls GOOD_PULL_BYTES batches of `topic` round the queues until stopped; every pull must
    answer messages."""

    address: str
    topic: str
    latencies_ms: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> GoodConsumer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        with RmqClient(self.address) as client:
            for n in range(1 << 30):
                if self._stop.is_set():
                    return
                mq = MessageQueue(self.topic, "broker-a", n % QUEUES)
                started = time.monotonic()
                try:
                    result = client.pull(mq, 0, 100_000, group="good", max_bytes=GOOD_PULL_BYTES)
                except RmqError as error:
                    self.failures.append(f"{type(error).__name__}: {error}")
                    continue
                self.latencies_ms.append((time.monotonic() - started) * 1000)
                if result.messages.count == 0:
                    self.failures.append(f"queue {mq.queue_id}: {result.pull_status.name}, no messages")
                self._stop.wait(0.05)


def stopped(pid: int) -> bool:
    """Whether the process is stopped (state T in /proc/PID/stat)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"


def wait_for(condition, what: str, timeout: float = 30.0) -> None:
    wait_until(condition, what, timeout, interval=0.2)   # the conditions scrape the metrics


def test_slow_readers_are_bounded_and_others_keep_pulling(tmp_path: Path, report: ReliabilityReport) -> None:
    metrics = f"127.0.0.1:{processes.free_port()}"
    server = configured_broker(tmp_path, flush="async", **SETTINGS)
    server.args += ["--metrics-listen", metrics]
    server.start()
    try:
        with RmqClient(server.address) as client:
            for topic in (TOPIC, PRODUCED):
                client.create_topic(topic, queues=QUEUES)
            for _ in range(QUEUES * QUEUE_MIB * MiB // BODY // 8):    # round robin over the queues
                client.send(TOPIC, [OutgoingMessage(b"x" * BODY) for _ in range(8)])
            assert {o.max_offset for o in client.topic_offsets(TOPIC).values()} == {QUEUE_MIB * MiB // BODY}
        with ResourceSampler(metrics, interval=0.5) as sampler, \
                Producers(server.address, PRODUCED, threads=1, batch=1, pause=0.01) as producer, \
                GoodConsumer(server.address, TOPIC) as consumer:

            def progressed(since: tuple[int, int]) -> bool:
                done = len(producer.ledger.latencies_ms), len(consumer.latencies_ms)
                return all(now >= start + more for now, start, more in zip(done, since, WINDOW, strict=True))

            wait_for(lambda: progressed((0, 0)), "the producer's and the good consumer's warm-up")
            rss_start = sampler.sample_now()["rss_mib"]
            before = len(producer.ledger.latencies_ms), len(consumer.latencies_ms)
            reader = subprocess.Popen(
                [sys.executable, "-c", SLOW_READER, server.address, str(READER_CONNECTIONS),
                 str(READER_PULLS), str(PULL_MIB * MiB), TOPIC, str(QUEUES)],
                stdout=subprocess.PIPE, text=True)
            try:
                assert reader.stdout is not None and reader.stdout.readline().strip() == "sent"
                wait_for(lambda: stopped(reader.pid), "the reader stopped itself (its socket fills)")
                wait_for(lambda: progressed(before) and sampler.sample_now()["inflight_pull_mib"] > 0,
                         "sends and good pulls while the stopped reader's answers are held")
                during = len(producer.ledger.latencies_ms), len(consumer.latencies_ms)
                held = sampler.sample_now()
            finally:
                reader.kill()
                reader.wait()
            wait_for(lambda: sampler.sample_now()["inflight_pull_mib"] <= GOOD_PULL_BYTES / MiB + 1,
                     "the bytes held for the killed reader released")
            after = len(producer.ledger.latencies_ms), len(consumer.latencies_ms)
            wait_for(lambda: progressed(after), "sends and good pulls after the reader is gone")
        final = sampler.sample_now()       # the producer and the consumer are done
        with RmqClient(server.address) as client:
            read = read_topic(client, PRODUCED)
    finally:
        server.stop()

    summaries = by_figure(sampler.summary(warm_up_s=0))
    rss_growth = sampler.overall_max("rss_mib") - rss_start
    ledger = producer.ledger
    producer_p99 = [float(np.percentile(ledger.latencies_ms[a:b], 99)) for a, b in
                    ((0, before[0]), (before[0], during[0]))]
    pull_p99 = [float(np.percentile(consumer.latencies_ms[a:b], 99)) for a, b in
                ((0, before[1]), (before[1], during[1]))]
    figures = report.record(tally(
        f"17 slow readers: {READER_PULLS} pulls of {PULL_MIB} MiB over {READER_CONNECTIONS} connections "
        f"never read (SIGSTOP, then kill -9), 1 producer and 1 consumer pulling {GOOD_PULL_BYTES // MiB} MiB "
        "batches beside", ledger.sent, (m.body for m in ledger.acknowledged_messages()),
        (m.body for m in read),
        notes=f"RSS +{rss_growth:.0f} MiB (bound {RSS_BOUND_MIB}); held for the stopped reader "
              f"{summaries['inflight_pull_mib'].max:.0f} MiB (budget {CONNECTION_BUDGET // MiB} MiB "
              f"per connection, {BUDGET // MiB} MiB in all)",
        producer_p99_ms_before=f"{producer_p99[0]:.1f}", producer_p99_ms_during=f"{producer_p99[1]:.1f}",
        pull_p99_ms_before=f"{pull_p99[0]:.1f}", pull_p99_ms_during=f"{pull_p99[1]:.1f}"))
    report.record_resources(
        "17 slow readers", f"Bounds lowered for the run: {SETTINGS}. Samples every 0.5 s over the whole run.",
        [summary.cells() for summary in summaries.values()])
    assert figures.lost == 0 and figures.duplicated == 0
    assert consumer.failures == [] and during[1] > before[1]
    assert ledger.errors == [] and during[0] > before[0]
    assert rss_growth < RSS_BOUND_MIB, f"RSS grew by {rss_growth:.0f} MiB for unread answers"
    assert held["inflight_pull_mib"] > 0, "the stopped reader's answers are counted"
    assert summaries["inflight_pull_mib"].max <= (BUDGET + READER_CONNECTIONS * 4 * MiB) / MiB
    assert final["inflight_pull_mib"] == 0 and final["held_pulls"] == 0
    assert final["rss_mib"] <= held["rss_mib"] + 32, "RSS keeps growing after the reader is gone"
