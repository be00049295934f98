"""Broker processes over time: graceful SIGTERM with held pulls, consumer offsets across a
restart, retention through --config, and command-line errors (membership and lock expiry and
delay levels: tests/broker_server/test_short_timers.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from integration_tests.reliability.resource_samples import scrape
from rmq.v1 import rmq_pb2
from testing import processes
from tests.rmq_stubs import Stubs, decode, suspend_fields
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

def test_sigterm_answers_held_pulls_and_offsets_survive_restart(tmp_path: Path) -> None:
    metrics = f"127.0.0.1:{processes.free_port()}"
    server = processes.broker(tmp_path, extra=["--metrics-listen", metrics]).start()
    rmq = Stubs.connect(server.address)
    try:
        rmq.create_topic("durable", queues=2)
        assert rmq.send("durable", rmq_pb2.Message(body=b"kept", queue_id=0)).status.code == rmq_pb2.OK
        update = rmq_pb2.UpdateConsumerOffsetsRequest(
            consumer_group="g",
            offsets=[
                rmq_pb2.ConsumerOffset(topic="durable", queue_id=0, offset=1),
                rmq_pb2.ConsumerOffset(topic="durable", queue_id=1, offset=0),
            ],
        )
        assert rmq.messaging.UpdateConsumerOffsets(update).status.code == rmq_pb2.OK
        held = rmq.messaging.PullMessage.future(
            rmq_pb2.PullMessageRequest(
                consumer_group="g",
                topic="durable",
                queue_id=1,
                queue_offset=0,
                max_messages=1,
                **suspend_fields(60000),
            ),
            timeout=60,
        )
        wait_until(lambda: scrape(metrics)["held_pulls"] == 1, "the pull held", interval=0.05)
        assert not held.done()
        stopped_at = time.monotonic()
        assert server.stop() == 0
        answer = held.result(timeout=10)
        assert time.monotonic() - stopped_at < 10
        assert answer.status.code == rmq_pb2.OK and answer.pull_status == rmq_pb2.NO_NEW_MSG
        assert "shutting down broker broker-a" in server.log()

        server.start()
        query = rmq.messaging.QueryConsumerOffsets(rmq_pb2.QueryConsumerOffsetsRequest(consumer_group="g"))
        assert {(o.topic, o.queue_id, o.offset) for o in query.offsets} == {
            ("durable", 0, 1),
            ("durable", 1, 0),
        }
        assert [m.body for m in decode(rmq.pull("durable", 0, 0))] == [b"kept"]
    finally:
        rmq.close()
        server.stop()


def run_rmq(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rmq.cli", *args], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["broker", "--flush", "maybe"], "argument --flush: invalid choice: 'maybe'"),
        (["broker", "--listen", "nowhere"], "listen must be HOST:PORT"),
        (["broker", "--config", "/no/such/file.yaml"], "cannot read config file /no/such/file.yaml"),
        (["namesrv", "--listen", "127.0.0.1:0"], "listen must be HOST:PORT"),
    ],
)
def test_bad_arguments_are_one_line(args: list[str], message: str) -> None:
    result = run_rmq(*args)
    assert result.returncode == 2
    assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_taken_port_and_foreign_store_are_refused(tmp_path: Path) -> None:
    server = processes.broker(tmp_path).start()
    try:
        result = run_rmq("broker", "--listen", server.address, "--store-dir", str(tmp_path / "other"))
        assert result.returncode == 2 and f"cannot listen on {server.address}" in result.stderr
        assert "Traceback" not in result.stderr
    finally:
        server.stop()
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a store")
    result = run_rmq("broker", "--listen", f"127.0.0.1:{processes.free_port()}", "--store-dir", str(foreign))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert str(foreign) in result.stderr


def test_retention_makes_old_offsets_too_small(tmp_path: Path) -> None:
    """OFFSET_TOO_SMALL and OFFSET_OVERFLOW_BADLY with min != 0 (spec TV-4) once expired
    CommitLog files are deleted; store settings come through the config file."""
    config = tmp_path / "broker.yaml"
    config.write_text(
        "store:\n  mapped_file_size_commit_log: 4096\n  mapped_file_size_consume_queue: 200\n"
        "  file_reserved_time_hours: 0\n  delete_when: now\n  clean_resource_interval_ms: 100\n"
        "  delete_commit_log_files_interval_ms: 0\n  message_index_enable: false\n"
    )
    server = processes.broker(tmp_path, extra=["--config", str(config)]).start()
    rmq = Stubs.connect(server.address)
    try:
        rmq.create_topic("aging", queues=1)
        for _ in range(10):
            assert rmq.send("aging", *[rmq_pb2.Message(body=b"x" * 200) for _ in range(10)]).status.code == 0

        def offsets() -> rmq_pb2.QueueOffsets:
            return rmq.messaging.GetTopicOffsets(rmq_pb2.GetTopicOffsetsRequest(topic="aging")).queues[0]

        deadline = time.monotonic() + 15
        while offsets().min_offset == 0 or offsets().max_offset < 100:
            assert time.monotonic() < deadline, "expired files were never deleted"
            time.sleep(0.1)
        queue = offsets()
        too_small = rmq.pull("aging", 0, 0)
        assert (too_small.pull_status, too_small.store_status) == (
            rmq_pb2.OFFSET_ILLEGAL,
            rmq_pb2.GMS_OFFSET_TOO_SMALL,
        )
        assert too_small.next_begin_offset == too_small.min_offset == queue.min_offset > 0
        badly = rmq.pull("aging", 0, queue.max_offset + 5)
        assert badly.store_status == rmq_pb2.GMS_OFFSET_OVERFLOW_BADLY
        assert badly.next_begin_offset == queue.max_offset  # min != 0: corrected to max
        found = rmq.pull("aging", 0, too_small.next_begin_offset)
        assert found.pull_status == rmq_pb2.FOUND
        assert decode(found)[0].queue_offset == queue.min_offset
    finally:
        rmq.close()
        server.stop()
