"""Scenario 3: the Spark driver is killed (SIGKILL) in the middle of a micro-batch — the batch
is planned in the checkpoint's offset log but not committed — and restarted from the same
checkpoint. The parquet output must hold every message exactly once (the interrupted batch
is replayed with the same offsets, no gap, no duplicate) and the group's broker-side
committed offsets must catch up (lag 0)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from integration_tests.reliability.report import ReliabilityReport, tally
from integration_tests.reliability.streaming import read_output
from integration_tests.reliability.traffic import Producers, gaps_and_repeats, read_topic
from rmq.connector.client import RmqClient
from testing import processes

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOPIC = "driver-crash"
GROUP = "driver-crash-group"
QUEUES = 4
JOB = [sys.executable, "-m", "integration_tests.reliability.spark_query_job",
       "--max-messages-per-trigger", "1500"]


def _batch_ids(directory: Path) -> set[int]:
    return {int(p.name) for p in directory.glob("[0-9]*")} if directory.is_dir() else set()


def _wait_mid_batch(job: subprocess.Popen, checkpoint: Path, timeout: float = 120) -> int:
    """Wait until a batch after the first is planned (offsets/N) but not committed (commits/N)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert job.poll() is None, f"driver exited early with {job.returncode}"
        planned, committed = _batch_ids(checkpoint / "offsets"), _batch_ids(checkpoint / "commits")
        running = planned - committed
        if committed and running:
            return max(running)
        time.sleep(0.01)
    raise AssertionError("the driver never had a batch in flight")


def test_driver_killed_mid_batch_resumes_from_checkpoint_exactly_once(
        spark, tmp_path: Path, report: ReliabilityReport) -> None:
    server = processes.broker(tmp_path, flush="sync")
    server.start()
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "output"
    args = [server.address, TOPIC, GROUP, str(checkpoint), str(output)]
    job = None
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=QUEUES)
        producers = Producers(server.address, TOPIC, threads=1, batch=100, max_batches=80, pause=0.05)
        with producers:
            with open(tmp_path / "driver-1.log", "wb") as log:
                job = subprocess.Popen(JOB + args, stdout=log, stderr=subprocess.STDOUT)
            killed_batch = _wait_mid_batch(job, checkpoint)
            job.send_signal(signal.SIGKILL)
            job.wait()
            producers.wait()
        with open(tmp_path / "driver-2.log", "wb") as log:
            rerun = subprocess.run(JOB + args + ["--available-now"], stdout=log, stderr=subprocess.STDOUT,
                                   timeout=300)
        assert rerun.returncode == 0, (tmp_path / "driver-2.log").read_text()[-3000:]
        with RmqClient(server.address) as client:
            stored = read_topic(client, TOPIC)
            max_offsets = {mq.queue_id: o.max_offset for mq, o in client.topic_offsets(TOPIC).items()}
            committed = {mq.queue_id: o for mq, o in client.query_consumer_offsets(GROUP, TOPIC).items()}
    finally:
        if job is not None and job.poll() is None:
            job.kill()
        server.stop()
    written = read_output(spark, str(output))

    acknowledged = producers.ledger.acknowledged_messages()
    lag = sum(max_offsets[q] - committed.get(q, 0) for q in max_offsets)
    figures = report.record(tally(
        "3 Spark driver kill -9 mid-batch, restart from checkpoint", producers.ledger.sent,
        (m.body for m in acknowledged), (m.body for m in written),
        notes=f"killed during batch {killed_batch}; broker-side lag after restart {lag}"))
    assert figures.lost == 0 and figures.duplicated == 0
    assert sorted(written) == sorted(stored)
    assert gaps_and_repeats(written) == ([], [])
    assert committed == max_offsets, f"group offsets {committed} did not catch up with {max_offsets}"
