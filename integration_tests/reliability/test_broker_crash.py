"""Scenario 1: the broker is killed with SIGKILL while several producer threads send batches.

Sync flush: a send is acknowledged only after its data reached the disk, so after a restart
every acknowledged (queue id, queue offset, body) is read back exactly once, at the offset the
acknowledgement named. Async flush: acknowledgement precedes the flush, so only messages
acknowledged within the last flush window before the kill may be missing; what is there has
contiguous, duplicate-free offsets.
"""

from __future__ import annotations

import time
from contextlib import closing
from pathlib import Path

import pytest

from integration_tests.reliability.brokers import configured_broker
from integration_tests.reliability.report import ReliabilityReport, tally
from integration_tests.reliability.traffic import Producers, gaps_and_repeats, read_topic
from rmq.connector.client import RmqClient
from testing import processes
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

TOPIC = "crash-topic"
QUEUES = 4
# Async flush (spec store §10.2) writes dirty pages every flush_interval_commit_log_ms and all of
# them at least every flush_commit_log_thorough_interval_ms: a message acknowledged more than
# one thorough interval plus one flush interval before the kill must survive it.
ASYNC_FLUSH = {"flush_interval_commit_log_ms": 200, "flush_commit_log_thorough_interval_ms": 1000}
ASYNC_FLUSH_WINDOW_S = 1.2


def _produce_through_kills(server: processes.ServerProcess, kills: int, acknowledged_between: int):
    """Producers keep sending (and retrying) while the broker is killed with SIGKILL `kills`
    times, each after `acknowledged_between` more acknowledgements, and restarted on the same
    store; then everything is read back. Returns the ledger, the kill times and the read."""
    with closing(RmqClient(server.address)) as admin:
        admin.create_topic(TOPIC, queues=QUEUES)
    producers = Producers(server.address, TOPIC, threads=4, batch=32)
    killed_at = []
    with producers:
        for kill in range(kills):
            target = acknowledged_between * (kill + 1)
            deadline = time.monotonic() + 60
            while len(producers.ledger.acknowledged) < target:
                assert time.monotonic() < deadline, f"producers stalled: {producers.ledger.errors[-3:]}"
                time.sleep(0.02)
            failed = len(producers.ledger.errors)
            server.kill()
            killed_at.append(time.monotonic())
            # sends meet the dead broker
            wait_until(lambda failed=failed: len(producers.ledger.errors) > failed,
                       lambda: f"no send failed against the dead broker: {producers.ledger.errors[-3:]}")
            server.start()
    with closing(RmqClient(server.address)) as reader:
        read = read_topic(reader, TOPIC)
    return producers.ledger, killed_at, read


def test_sync_flush_kill9_keeps_every_acknowledged_message_at_its_offset(
        tmp_path: Path, report: ReliabilityReport) -> None:
    server = processes.broker(tmp_path, flush="sync")
    server.start()
    try:
        ledger, _, read = _produce_through_kills(server, kills=3, acknowledged_between=2000)
    finally:
        server.stop()

    acknowledged = ledger.acknowledged_messages()
    figures = report.record(tally(
        "1 broker kill -9 x3 under sync flush (4 producers)", ledger.sent,
        (m.body for m in acknowledged), (m.body for m in read),
        notes=f"every acknowledged (queue, offset, body) read back at its offset; "
              f"{len(read) - len(acknowledged)} sends in flight at a kill were stored unacknowledged"))
    read_set = set(read)
    misplaced = [m for m in acknowledged if m not in read_set]
    assert misplaced == [], f"{len(misplaced)} acknowledged messages not at their offset: {misplaced[:3]}"
    assert figures.lost == 0 and figures.duplicated == 0
    gaps, repeats = gaps_and_repeats(read)
    assert gaps == [] and repeats == []


def test_async_flush_kill9_loses_at_most_the_last_flush_window(
        tmp_path: Path, report: ReliabilityReport) -> None:
    server = configured_broker(tmp_path, flush="async", store=ASYNC_FLUSH)
    server.start()
    try:
        ledger, killed_at, read = _produce_through_kills(server, kills=1, acknowledged_between=3000)
    finally:
        server.stop()

    read_bodies = {m.body for m in read}
    lost = [ack for ack in ledger.acknowledged if ack.message.body not in read_bodies]
    figures = report.record(tally(
        "1 broker kill -9 under async flush (4 producers)", ledger.sent,
        (ack.message.body for ack in ledger.acknowledged), (m.body for m in read),
        notes=f"loss allowed only within the last {ASYNC_FLUSH_WINDOW_S} s flush window; "
              "kill -9 keeps the page cache, so a loss needs a machine crash"))
    too_old = [ack for ack in lost if ack.at < killed_at[0] - ASYNC_FLUSH_WINDOW_S]
    assert too_old == [], f"{len(too_old)} messages acknowledged long before the kill were lost"
    assert figures.duplicated == 0
    surviving = [ack.message for ack in ledger.acknowledged if ack.message.body in read_bodies]
    assert set(surviving) <= set(read), "a surviving message moved to another offset"
    gaps, repeats = gaps_and_repeats(read)
    assert gaps == [] and repeats == []
