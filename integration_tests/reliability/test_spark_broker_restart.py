"""Scenario 2: the broker is killed (SIGKILL) and restarted while a Spark streaming query
reads from it. The kill lands between micro-batches, so the driver's next triggers
(latestOffset) and then the executors' pulls meet the dead broker. The query must not fail
(both sides retry with backoff), must catch up once the broker is back, and its parquet
output (file sink + checkpoint) must hold every message the broker stored exactly once."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from integration_tests.reliability.report import ReliabilityReport, tally
from integration_tests.reliability.streaming import read_output, start_query, wait_until_caught_up
from integration_tests.reliability.traffic import Producers, gaps_and_repeats, read_topic
from rmq.connector.client import RmqClient
from testing import processes

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOPIC = "spark-restart"
QUEUES = 4
DOWN_SECONDS = 3.0


def test_streaming_query_survives_a_broker_kill9_and_writes_every_message_once(
        spark, tmp_path: Path, report: ReliabilityReport) -> None:
    server = processes.broker(tmp_path, flush="sync")
    server.start()
    query = None
    failure: str | None = None
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=QUEUES)
        producers = Producers(server.address, TOPIC, threads=1, batch=50, pause=0.1)
        try:
            with producers:
                query = start_query(spark, server.address, TOPIC, "spark-restart-group",
                                    str(tmp_path / "checkpoint"), str(tmp_path / "output"),
                                    maxMessagesPerTrigger="1000")   # default brokerOutageWindowMs
                _wait_for_batches(query, 2)
                _wait_between_batches(query)
                server.kill()
                time.sleep(DOWN_SECONDS)   # the behaviour under test: an outage this long under the query
                server.start()
                _wait_for_batches(query, len(query.recentProgress) + 2)
            with RmqClient(server.address) as client:
                max_offsets = {mq.queue_id: o.max_offset for mq, o in client.topic_offsets(TOPIC).items()}
            wait_until_caught_up(query, TOPIC, max_offsets, timeout=120)
        except AssertionError as error:     # the figures still go in the report
            failure = _cause(str(error))
        if server.process.poll() is not None:
            server.start()
        with RmqClient(server.address) as client:
            stored = read_topic(client, TOPIC)
        query.stop()
        output = read_output(spark, str(tmp_path / "output"))
    finally:
        if query is not None and query.isActive:
            query.stop()
        server.stop()

    acknowledged = producers.ledger.acknowledged_messages()
    figures = report.record(tally(
        "2 Spark stream, broker kill -9 + restart", producers.ledger.sent,
        (m.body for m in acknowledged), (m.body for m in output),
        notes=(f"QUERY FAILED: {failure[:300]}" if failure else "query kept running")
              + f"; broker down {DOWN_SECONDS:.0f} s + restart; default options; parquet sink",
        stored=len(stored)))
    assert failure is None, failure
    assert figures.lost == 0 and figures.duplicated == 0
    assert sorted(output) == sorted(stored), "output differs from the store"
    assert gaps_and_repeats(output) == ([], [])


def _cause(text: str) -> str:
    """Where the query died and the connector's error line from Spark's wrapped exception."""
    where = re.search(r"perform (\w+)", text)
    cause = re.search(r"connector\.[\w.]+: [^\n]+", text)
    if not cause:
        return text.splitlines()[0]
    return (f"in {where.group(1)}: " if where else "") + cause.group(0)


def _wait_between_batches(query, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while query.status["isTriggerActive"]:
        assert time.monotonic() < deadline, f"query never idle: {query.status}"
        time.sleep(0.05)


def _wait_for_batches(query, batches: int, timeout: float = 90) -> None:
    """Wait until the query completed `batches` micro-batches that read rows."""
    deadline = time.monotonic() + timeout
    while sum(1 for p in query.recentProgress if p["numInputRows"]) < batches:
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        assert time.monotonic() < deadline, f"query made no progress: {query.status}"
        time.sleep(0.2)
