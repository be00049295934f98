"""Scenario 14: many topics. One broker with 2,000 topics x 4 queues (`make reliability`; 400 in
`make test`), a little data in every queue, then restarted: topic creation and start-up time,
RSS, open fds and mmaps before and after the restart, and the first pull's latency (figures, not
bounds: timing lives in the report). Bounded: RSS after the restart (recovery no longer rewrites
every file), the open fds and mmaps by the store's max_mapped_consume_queue_files (set far below
the queue count here: each mapped ConsumeQueue file holds a map and the fd Python 3.11's mmap
keeps, so 2,000 x 4 queues held ~8,000 of each; the least recently used are unmapped), and every
message is read back after the restart."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from integration_tests.reliability.brokers import configured_broker
from integration_tests.reliability.report import REPORT_ENV, ReliabilityReport, tally
from integration_tests.reliability.resource_samples import scrape
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.spark.message_decoder import decode
from testing import processes

pytestmark = pytest.mark.integration

TOPICS = int(os.environ.get("RMQ_MANY_TOPICS", 2_000 if os.environ.get(REPORT_ENV) == "1" else 200))
QUEUES = 4
RSS_GROWTH_BOUND_MIB = 128 + TOPICS * QUEUES * 64 / 1024   # 64 KiB per queue read (2,000 x 4: +420 MiB)
OTHER_FDS = 128         # connections, the CommitLog, index and config files, the metrics server
MAX_MAPPED = 256        # max_mapped_consume_queue_files: far below the TOPICS x QUEUES files
OTHER_MAPS = 768        # libraries, heap and thread stacks, CommitLog and index files (~400)


def topic_name(n: int) -> str:
    return f"many-{n:05d}"


def first_pull_ms(client: RmqClient, topic: str) -> float:
    started = time.monotonic()
    client.pull(MessageQueue(topic, "broker-a", 0), 0, 32, group="many-reader")
    return (time.monotonic() - started) * 1000


def test_many_topics_start_and_read_without_a_descriptor_or_map_per_queue(
        tmp_path: Path, report: ReliabilityReport) -> None:
    metrics = f"127.0.0.1:{processes.free_port()}"
    server = configured_broker(tmp_path, flush="async", store={"max_mapped_consume_queue_files": MAX_MAPPED},
                               metrics_listen=metrics)
    server.ready_timeout = 600       # the restart's time is a figure here, not a bound
    server.start()
    sent: list[bytes] = []
    read: list[bytes] = []
    try:
        with RmqClient(server.address, timeout=60) as client:
            started = time.monotonic()
            for n in range(TOPICS):
                client.create_topic(topic_name(n), queues=QUEUES)
            create_s = time.monotonic() - started
            for n in range(TOPICS):
                bodies = [f"{topic_name(n)}-{q}".encode() for q in range(QUEUES)]
                client.send(topic_name(n), [OutgoingMessage(b, queue_id=q) for q, b in enumerate(bodies)])
                sent += bodies
            sent_s = time.monotonic() - started - create_s
            deadline = time.monotonic() + 600
            while (loaded := scrape(metrics))["dispatch_behind_bytes"] > 0:   # every queue's file exists
                assert time.monotonic() < deadline, "ConsumeQueues not dispatched within 600 s"
                time.sleep(0.5)
            dispatched_s = time.monotonic() - started - create_s
            pull_before_ms = first_pull_ms(client, topic_name(TOPICS // 2))
        assert server.stop(timeout=300) == 0
        started = time.monotonic()
        server.start()
        start_s = time.monotonic() - started
        with RmqClient(server.address, timeout=60) as client:
            restarted = scrape(metrics)
            pull_after_ms = first_pull_ms(client, topic_name(TOPICS // 3))
            for n in range(TOPICS):
                for q in range(QUEUES):
                    mq = MessageQueue(topic_name(n), "broker-a", q)
                    result = client.pull(mq, 0, 32, group="many-reader")
                    read += decode(result.messages, "broker-a").to_pydict()["body"]
            after_read = scrape(metrics)
    finally:
        server.stop()

    figures = report.record(tally(
        f"14 many topics: {TOPICS:,} topics x {QUEUES} queues, one message per queue, broker restarted",
        len(sent), sent, read,
        notes=f"created in {create_s:.1f} s; sent in {sent_s:.1f} s, dispatched (a ConsumeQueue file per "
              f"queue) in {dispatched_s:.1f} s; restart ready in {start_s:.1f} s; first pull "
              f"{pull_before_ms:.1f} ms before / {pull_after_ms:.1f} ms after the restart"))
    report.record_resources(
        f"14 many topics ({TOPICS:,} x {QUEUES})",
        "Three samples: loaded (before the restart), just restarted, after reading every queue. "
        "Columns: loaded, max, after reading; slope not measured (n/a).",
        [[name, f"{loaded[name]:.0f}", f"{max(loaded[name], restarted[name], after_read[name]):.0f}",
          f"{after_read[name]:.0f}", "n/a"] for name in ("rss_mib", "open_fds", "threads", "mmaps")])
    assert figures.lost == 0 and figures.duplicated == 0
    assert loaded["topics"] == restarted["topics"] == TOPICS
    # a restart leaves the barely used files neither resident nor rewritten (they were: +4.7 GB at 800)
    assert after_read["rss_mib"] - loaded["rss_mib"] < RSS_GROWTH_BOUND_MIB
    samples = (loaded, restarted, after_read)
    assert max(sample["open_fds"] for sample in samples) < MAX_MAPPED + OTHER_FDS
    assert max(sample["mmaps"] for sample in samples) < MAX_MAPPED + OTHER_MAPS
