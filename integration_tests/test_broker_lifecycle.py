"""Broker processes over time: graceful SIGTERM with held pulls, consumer offsets across a
restart, membership and lock expiry, delay levels (short values set through --config), and
command-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration_tests.reliability.resource_samples import scrape
from integration_tests.rmq_stubs import Stubs, decode, suspend_fields
from rmq import message_format as mf
from rmq.v1 import rmq_pb2
from testing import processes
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

SHORT_TIMERS = {
    "client_expiry_ms": 1000,
    "client_scan_interval_ms": 200,
    "rebalance_lock_max_live_time_ms": 1000,
    "message_delay_level": "1s 2s",
}


@pytest.fixture(scope="module")
def short_timers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stubs]:
    """A broker whose expiries and delay levels take about a second."""
    directory = tmp_path_factory.mktemp("short-timers")
    config = directory / "broker.json"
    config.write_text(json.dumps(SHORT_TIMERS))
    server = processes.broker(directory, extra=["--config", str(config)]).start()
    stubs = Stubs.connect(server.address)
    yield stubs
    stubs.close()
    assert server.stop() == 0


def consumer_list(rmq: Stubs, group: str) -> list[str]:
    return list(
        rmq.messaging.GetConsumerList(rmq_pb2.GetConsumerListRequest(consumer_group=group)).client_ids
    )


def heartbeat(rmq: Stubs, client_id: str, group: str = "members") -> None:
    request = rmq_pb2.HeartbeatRequest(
        client_id=client_id,
        consumer_group=group,
        subscriptions=[rmq_pb2.Subscription(topic="t", sub_expression="*")],
    )
    assert rmq.messaging.Heartbeat(request).status.code == rmq_pb2.OK


def test_membership_expires_silent_clients(short_timers: Stubs) -> None:
    rmq = short_timers
    heartbeat(rmq, "client-b")
    heartbeat(rmq, "client-a")
    assert consumer_list(rmq, "members") == ["client-a", "client-b"]
    silent_since = time.monotonic()

    def only_the_beating_client_left() -> bool:
        heartbeat(rmq, "client-b")   # client-b keeps beating (every poll), client-a falls silent
        return consumer_list(rmq, "members") == ["client-b"]

    wait_until(only_the_beating_client_left, "the silent client-a expired", interval=0.2)
    assert time.monotonic() - silent_since >= 0.9   # not before its 1 s expiry
    unregister = rmq_pb2.UnregisterClientRequest(client_id="client-b", consumer_group="members")
    assert rmq.messaging.UnregisterClient(unregister).status.code == rmq_pb2.OK
    assert consumer_list(rmq, "members") == []


def test_queue_locks_expire_and_renew(short_timers: Stubs) -> None:
    rmq = short_timers
    rmq.create_topic("ordered", queues=1)      # only existing queues can be locked
    mq = rmq_pb2.MessageQueue(topic="ordered", broker_name="broker-a", queue_id=0)

    def lock(client_id: str) -> bool:
        request = rmq_pb2.LockBatchRequest(consumer_group="lockers", client_id=client_id, queues=[mq])
        response = rmq.messaging.LockBatchMQ(request)
        assert response.status.code == rmq_pb2.OK
        return list(response.locked_queues) == [mq]

    assert lock("A")
    for _ in range(4):   # the last B attempt comes 1.2 s after the first lock: the renewals kept it
        time.sleep(0.3)   # the behaviour under test: the holder renews its lock, well within the 1 s lifetime
        assert not lock("B")
        assert lock("A")
    renewed_at = time.monotonic()
    wait_until(lambda: lock("B"), "A's lock expired once A fell silent", interval=0.1)
    assert time.monotonic() - renewed_at >= 0.9   # not before its 1 s lifetime
    unlock = rmq_pb2.UnlockBatchRequest(consumer_group="lockers", client_id="B", queues=[mq])
    assert rmq.messaging.UnlockBatchMQ(unlock).status.code == rmq_pb2.OK
    assert lock("A")


def test_delay_levels_deliver_after_their_delay(short_timers: Stubs) -> None:
    rmq = short_timers
    rmq.create_topic("later", queues=2)
    sent_ms = int(time.time() * 1000)
    sent = rmq.send(
        "later",
        rmq_pb2.Message(body=b"one second", queue_id=1, delay_level=1, tags="TagA"),
        rmq_pb2.Message(body=b"two seconds", queue_id=1, delay_level=2),
        rmq_pb2.Message(body=b"capped at two", queue_id=1, delay_level=9),
    )
    assert sent.status.code == rmq_pb2.OK
    assert list(sent.queue_ids) == [1, 1, 1] and list(sent.queue_offsets) == [-1, -1, -1]
    assert rmq.pull("later", 1, 0).pull_status == rmq_pb2.NO_NEW_MSG  # not visible yet

    first = rmq.pull("later", 1, 0, **suspend_fields(10000))
    [early] = decode(first)
    assert early.body == b"one second" and early.store_timestamp >= sent_ms + 1000
    assert early.properties[mf.PROPERTY_TAGS] == "TagA"
    assert early.properties[mf.PROPERTY_REAL_TOPIC] == "later"
    assert mf.PROPERTY_DELAY_TIME_LEVEL not in early.properties
    rest = []
    while len(rest) < 2:
        response = rmq.pull("later", 1, first.next_begin_offset + len(rest), **suspend_fields(10000))
        rest += decode(response)
    assert sorted(m.body for m in rest) == [b"capped at two", b"two seconds"]
    assert all(m.store_timestamp >= sent_ms + 2000 for m in rest)
    assert all(m.topic == "later" and m.queue_id == 1 for m in rest)


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
