"""Scenario 6: load. Several producer threads and two consumer groups of two PushConsumers each
(the product's rebalance shares the 8 queues within a group, long-polling pulls) against one
broker on loopback for a fixed time. Figures: send throughput, p50/p99 batch send latency, and
per group its own consume throughput (messages over the time from the first send to the group's
last received message); every acknowledged message is received exactly once by each group
(membership is stable while messages flow: no queue moves, so no redelivery)."""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest

from integration_tests.reliability.report import ReliabilityReport, tally
from integration_tests.reliability.traffic import Producers, PushGroup, gaps_and_repeats
from rmq.connector.client import RmqClient
from testing import processes

pytestmark = pytest.mark.integration

TOPIC = "load"
QUEUES = 8
GROUPS = ("load-group-a", "load-group-b")
SECONDS = 10.0


def test_producers_and_two_groups_under_load_read_everything_once_per_group(
        tmp_path: Path, report: ReliabilityReport) -> None:
    server = processes.broker(tmp_path, flush="sync")
    server.start()
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=QUEUES)
        groups = [PushGroup(server.address, TOPIC, group, consumers=2) for group in GROUPS]
        with ExitStack() as stack:
            for group in groups:
                stack.enter_context(group)
            for group in groups:
                group.wait_balanced(QUEUES)
            owners = {group.group: [len(owned) for owned in group.owners()] for group in groups}
            started = time.monotonic()
            with Producers(server.address, TOPIC, threads=3, batch=64, body_size=100) as producers:
                time.sleep(SECONDS)   # the behaviour under test: load this long
            produced_for = time.monotonic() - started
            with RmqClient(server.address) as client:
                stored = sum(o.max_offset for o in client.topic_offsets(TOPIC).values())
            reads = {group.group: (group.wait_read(stored), group.last_read_at - started) for group in groups}
    finally:
        server.stop()

    ledger = producers.ledger
    acknowledged = ledger.acknowledged_messages()
    latencies = np.array(ledger.latencies_ms)
    for name, (read, consumed_for) in reads.items():
        figures = report.record(tally(
            f"6 load: 3 producers, group {name[-1]} of 2 PushConsumers", ledger.sent,
            (m.body for m in acknowledged), (m.body for m in read),
            notes=f"{SECONDS:.0f} s, sync flush, 64-message batches of 100 B; queues per consumer "
                  f"{owners[name]} (rebalance)",
            send_msgs_per_s=f"{len(acknowledged) / produced_for:.0f}",
            consume_msgs_per_s=f"{len(read) / consumed_for:.0f}",
            send_batch_p50_ms=f"{np.percentile(latencies, 50):.1f}",
            send_batch_p99_ms=f"{np.percentile(latencies, 99):.1f}"))
        assert figures.lost == 0 and figures.duplicated == 0
        assert set(acknowledged) <= set(read)
        assert gaps_and_repeats(read) == ([], [])
    assert ledger.errors == []
