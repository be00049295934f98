"""Scenario 16: restart under load. Producers and a group of two PushConsumers run against one
broker (sync flush) while it is stopped with SIGTERM and restarted, then killed -9 and
restarted (twice each in `make reliability`, once each in `make test`). Nothing acknowledged
is lost, and the consumers resume after every restart without being restarted themselves:
the group reads every acknowledged message (repeats after a kill -9 are counted, not failed:
offsets committed every few seconds may be behind what was consumed)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from integration_tests.reliability.report import REPORT_ENV, ReliabilityReport, tally
from integration_tests.reliability.traffic import Producers, PushGroup
from rmq.connector.client import RmqClient
from testing import processes
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

TOPIC, GROUP = "restart-load", "restart-load-group"
QUEUES = 4
ROUNDS = 2 if os.environ.get(REPORT_ENV) == "1" else 1
LOAD_ACKS = 1000   # messages acknowledged between two restarts (and after the last one)


def test_sigterm_and_kill_under_load_lose_nothing_and_consumers_resume(
        tmp_path: Path, report: ReliabilityReport) -> None:
    server = processes.broker(tmp_path, flush="sync").start()
    resumed_after: list[float] = []
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=QUEUES)
        with PushGroup(server.address, TOPIC, GROUP, consumers=2) as group:
            group.wait_balanced(QUEUES)
            with Producers(server.address, TOPIC, threads=2, batch=16, pause=0.02) as producers:

                def under_load() -> None:
                    target = len(producers.ledger.acknowledged) + LOAD_ACKS
                    wait_until(lambda: len(producers.ledger.acknowledged) >= target,
                               f"{LOAD_ACKS} more messages acknowledged", timeout=120, interval=0.05)

                for _ in range(ROUNDS):
                    for stop in (server.stop, server.kill):
                        under_load()
                        stop()
                        server.start()
                        restarted = time.monotonic()
                        before = len(group.read)
                        deadline = restarted + 120
                        while len(group.read) == before:
                            assert time.monotonic() < deadline, "the group read nothing after the restart"
                            time.sleep(0.05)
                        resumed_after.append(time.monotonic() - restarted)
                under_load()
            ledger = producers.ledger
            acknowledged = [m.body for m in ledger.acknowledged_messages()]
            deadline = time.monotonic() + 180
            while set(acknowledged) - {m.body for m in list(group.read)}:
                assert time.monotonic() < deadline, "acknowledged messages not consumed within 180 s"
                time.sleep(0.2)
            read = list(group.read)
    finally:
        server.stop()

    figures = report.record(tally(
        f"16 restart under load: SIGTERM + kill -9, {ROUNDS}x each, sync flush (2 producers, a group of "
        f"2 PushConsumers)", ledger.sent, acknowledged, (m.body for m in read),
        notes=f"the group read again {', '.join(f'{s:.1f}' for s in resumed_after)} s after each restart; "
              f"{len(ledger.errors)} sends failed while the broker was down (not acknowledged)"))
    assert figures.lost == 0
    assert len(resumed_after) == 2 * ROUNDS
