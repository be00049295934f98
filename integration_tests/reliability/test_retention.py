"""Scenario 5: retention deletes CommitLog files under active Spark readers. Two streaming
queries read the same topic slowly (maxMessagesPerTrigger) while a burst of messages rolls
small CommitLog files that retention deletes seconds later, before the readers get there:
with failOnDataLoss=true the query fails naming the lost range; with false it skips to the
earliest offset still held, logs the gap size and reads the rest exactly once."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from integration_tests.reliability.brokers import configured_broker
from integration_tests.reliability.report import ReliabilityReport, tally
from integration_tests.reliability.streaming import read_output, start_query, wait_until_caught_up
from integration_tests.reliability.traffic import Producers, gaps_and_repeats, read_topic
from rmq.connector.client import RmqClient
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.spark]

TOPIC = "retention"
QUEUES = 2
RETENTION_S = 2.0
RETENTION = {
    "mapped_file_size_commit_log": 64 * 1024,
    "mapped_file_size_consume_queue": 20 * 256,
    "file_reserved_time_hours": RETENTION_S / 3600,
    "delete_when": "now",
    "clean_resource_interval_ms": 200,
}


def test_retention_under_active_readers_fails_or_skips_as_configured(
        spark, tmp_path: Path, report: ReliabilityReport) -> None:
    server = configured_broker(tmp_path, store=RETENTION)
    server.start()
    queries = {}
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=QUEUES)
        # less than one CommitLog file: nothing rolls, so nothing expires, before the burst
        with Producers(server.address, TOPIC, threads=1, batch=50, body_size=200, max_batches=2) as first:
            first.wait()
        for fail in ("true", "false"):
            queries[fail] = start_query(
                spark, server.address, TOPIC, f"retention-{fail}", str(tmp_path / f"checkpoint-{fail}"),
                str(tmp_path / f"output-{fail}"), maxMessagesPerTrigger="100", failOnDataLoss=fail)
        _wait_for_rows(queries.values())
        with Producers(server.address, TOPIC, threads=2, batch=100, body_size=200, max_batches=10) as burst:
            burst.wait()
        with RmqClient(server.address) as client:
            offsets = _settled_offsets(client)
            held = read_topic(client, TOPIC)
        assert all(o.min_offset > 0 for o in offsets.values()), f"retention deleted nothing: {offsets}"

        failure = _wait_for_failure(queries["true"])
        ends = {mq.queue_id: o.max_offset for mq, o in offsets.items()}
        wait_until_caught_up(queries["false"], TOPIC, ends, timeout=180)
        assert queries["false"].exception() is None
        for query in queries.values():
            query.stop()
        output = read_output(spark, str(tmp_path / "output-false"))
        output_before_failure = read_output(spark, str(tmp_path / "output-true"))
    finally:
        for query in queries.values():
            if query.isActive:
                query.stop()
        server.stop()

    acknowledged = first.ledger.acknowledged_messages() + burst.ledger.acknowledged_messages()
    figures = report.record(tally(
        "5 retention under a Spark reader, failOnDataLoss=false", first.ledger.sent + burst.ledger.sent,
        (m.body for m in acknowledged), (m.body for m in output),
        notes=f"lost = deleted by retention before the reader got there (by design); "
              f"failOnDataLoss=true failed after {len(output_before_failure)} rows: {failure[:200]}"))
    assert "failOnDataLoss" in failure and "no longer exist" in failure
    assert figures.duplicated == 0
    assert set(held) <= set(output), "a message still held by the broker was skipped"
    assert set(output) <= set(acknowledged)
    assert gaps_and_repeats(output_before_failure) == ([], []), "failOnDataLoss=true skipped messages"


def _settled_offsets(client: RmqClient, quiet_s: float = 1.0, timeout: float = 30):
    """Topic offsets once retention has deleted the oldest files of every queue (RETENTION_S
    after they were written) and stopped moving them for `quiet_s`."""
    wait_until(lambda: all(o.min_offset > 0 for o in client.topic_offsets(TOPIC).values()),
               "retention deleted the oldest files of every queue", timeout + RETENTION_S, interval=0.2)
    deadline = time.monotonic() + timeout
    last = client.topic_offsets(TOPIC)
    while time.monotonic() < deadline:
        time.sleep(quiet_s)   # a stability window: retention has nothing more to delete once it passes
        now = client.topic_offsets(TOPIC)
        if now == last:
            return now
        last = now
    raise AssertionError(f"retention still moving offsets after {timeout}s: {last}")


def _wait_for_rows(queries, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not all(any(p["numInputRows"] for p in q.recentProgress) for q in queries):
        assert time.monotonic() < deadline, "the readers never started reading"
        time.sleep(0.2)


def _wait_for_failure(query, timeout: float = 120) -> str:
    """The failOnDataLoss=true query's error: the connector's own line from Spark's exception."""
    deadline = time.monotonic() + timeout
    while query.exception() is None:
        assert time.monotonic() < deadline, f"failOnDataLoss=true query did not fail: {query.status}"
        time.sleep(0.5)
    text = str(query.exception())
    match = re.search(r"RmqDataLossError: (.+)", text)
    return match.group(1) if match else text


def test_executor_reader_logs_the_gap_it_skips_and_fails_on_it_by_default(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, report: ReliabilityReport) -> None:
    """The executor side of the source, run in this process so its log can be read: a range
    starting at 0 after retention deleted the head of the queue."""
    from rmq.connector.spark.options import parse_source_options
    from rmq.connector.spark.partition_reader import QueueRangePartition, RmqDataLossError, read_queue_range

    server = configured_broker(tmp_path, store=RETENTION)
    server.start()
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=1)
        producers = Producers(server.address, TOPIC, threads=1, batch=100, body_size=200, max_batches=10)
        with producers:
            producers.wait()
        with RmqClient(server.address) as client:
            [(mq, offsets)] = _settled_offsets(client).items()
            held = read_topic(client, TOPIC)

        def partition(fail_on_data_loss: str) -> QueueRangePartition:
            options = parse_source_options({"endpoints": server.address, "topic": TOPIC,
                                            "failOnDataLoss": fail_on_data_loss}, streaming=False)
            return QueueRangePartition(mq, 0, offsets.max_offset, options.pull)

        with pytest.raises(RmqDataLossError, match="failOnDataLoss=false") as refused:
            list(read_queue_range(partition("true")))
        with caplog.at_level("WARNING", logger="rmq.connector.spark.partition_reader"):
            rows = [row for batch in read_queue_range(partition("false")) for row in batch.to_pylist()]
    finally:
        server.stop()

    skipped = [int(n) for n in re.findall(r"skipping (\d+) messages", caplog.text)]
    read = [row["body"] for row in rows]
    figures = report.record(tally(
        "5 retention under the executor reader, failOnDataLoss=false", producers.ledger.sent,
        (m.body for m in producers.ledger.acknowledged_messages()), read,
        notes=f"gap logged: skipping {sum(skipped)} messages; true: {str(refused.value)[:120]}"))
    assert offsets.min_offset > 0, "retention deleted nothing"
    assert figures.duplicated == 0
    assert sorted(read) == sorted(m.body for m in held)
    assert sum(skipped) == figures.lost == offsets.min_offset
