"""The `rmq` client commands as a user runs them: subprocesses against a real broker."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration_tests.reliability.resource_samples import scrape
from testing import processes
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def shared_metrics() -> str:
    """The shared broker's Prometheus endpoint (its hold table: rmq_held_pulls)."""
    return f"127.0.0.1:{processes.free_port()}"


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory,
                  shared_metrics: str) -> Iterator[processes.ServerProcess]:
    """One broker for the tests that leave it running (each uses its own topics and groups)."""
    server = processes.broker(tmp_path_factory.mktemp("cli"),
                              extra=["--metrics-listen", shared_metrics]).start()
    yield server
    server.stop()


def rmq(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RMQ_")}
    return subprocess.run(processes.RMQ + list(args), input=stdin, capture_output=True, text=True, env=env,
                          timeout=timeout)


def ok(*args: str, stdin: str | None = None) -> str:
    done = rmq(*args, stdin=stdin)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def assert_one_line_error(done: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert done.returncode != 0
    assert "Traceback" not in done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("rmq: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


def consumed_lines(stdout: str) -> list[list[str]]:
    """`queue_id offset tags keys body` per line."""
    return [line.split(" ", 4) for line in stdout.splitlines()]


def wait_for_messages(endpoints: str, topic: str, count: int) -> None:
    """Sends are acknowledged once stored; queue max offsets follow the dispatch."""
    deadline = time.monotonic() + 20
    while sum(q["max_offset"] for q in describe(endpoints, topic)["queues"]) < count:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def describe(endpoints: str, topic: str) -> dict:
    return json.loads(ok("topic", "describe", topic, "--json", "--endpoints", endpoints))


def progress(endpoints: str, group: str, *extra: str) -> dict:
    return json.loads(ok("group", "progress", group, "--json", "--endpoints", endpoints, *extra))


def test_topic_create_list_describe_delete(shared_broker: processes.ServerProcess) -> None:
    e = shared_broker.address
    assert ok("topic", "create", "Orders", "--queues", "3", "--endpoints", e).strip() == (
        "created topic Orders with 3 queues on broker-a")

    listed = json.loads(ok("topic", "list", "--json", "--endpoints", e))["topics"]
    assert {"topic": "Orders", "read_queue_nums": 3, "write_queue_nums": 3, "perm": 6} in listed
    assert "Orders" in ok("topic", "list", "--endpoints", e)

    described = describe(e, "Orders")
    members = described["brokers"][0].pop("members")   # one member: the master (docs/replication.md)
    assert [(m["broker_id"], m["role"], m["address"], m["lag_bytes"], m["state"]) for m in members] == [
        (0, "ASYNC_MASTER", e, None, "ok")]
    assert described["brokers"] == [{"broker_name": "broker-a", "address": e, "read_queue_nums": 3,
                                     "write_queue_nums": 3, "perm": 6}]
    assert described["queues"] == [{"broker_name": "broker-a", "queue_id": q, "min_offset": 0,
                                    "max_offset": 0, "last_store_timestamp": 0} for q in range(3)]
    text = ok("topic", "describe", "Orders", "--endpoints", e)
    assert "MIN_OFFSET" in text and "MAX_OFFSET" in text

    assert ok("topic", "update", "Orders", "--queues", "5", "--endpoints", e).strip() == (
        "updated topic Orders to 5 queues on broker-a")
    assert [q["queue_id"] for q in describe(e, "Orders")["queues"]] == list(range(5))
    assert_one_line_error(rmq("topic", "update", "Orders", "--queues", "2", "--endpoints", e),
                          "ILLEGAL_ARGUMENT", "cannot shrink from 5 to 2")
    ok("topic", "update", "Orders", "--queues", "5", "--perm", "4", "--endpoints", e)
    assert describe(e, "Orders")["brokers"][0]["perm"] == 4

    assert ok("topic", "delete", "Orders", "--endpoints", e).strip() == "deleted topic Orders"
    assert_one_line_error(rmq("topic", "describe", "Orders", "--endpoints", e), "TOPIC_NOT_EXIST", "Orders")


def test_produce_lines_from_stdin_and_consume_them(shared_broker: processes.ServerProcess) -> None:
    e = shared_broker.address
    ok("topic", "create", "Lines", "--queues", "1", "--endpoints", e)

    out = ok("produce", "Lines", "--tags", "TagA", "--keys", "k1", "--endpoints", e,
             stdin="first\nsecond ✓\n\nthird\n")
    consumed = ok("consume", "Lines", "--from", "earliest", "--max-messages", "3", "--endpoints", e)

    assert out.strip() == "sent 3 messages (acknowledged 3)"
    assert consumed_lines(consumed) == [["0", "0", "TagA", "k1", "first"],
                                        ["0", "1", "TagA", "k1", "second ✓"],
                                        ["0", "2", "TagA", "k1", "third"]]


def test_produce_generated_messages_and_consume_until_idle(shared_broker: processes.ServerProcess) -> None:
    e = shared_broker.address
    ok("topic", "create", "Generated", "--queues", "4", "--endpoints", e)

    out = ok("produce", "Generated", "--count", "300", "--size", "20", "--batch-size", "64", "--endpoints", e)
    consumed = consumed_lines(ok("consume", "Generated", "--from", "earliest", "--idle-timeout", "2",
                                 "--endpoints", e))

    assert out.strip() == "sent 300 messages (acknowledged 300)"
    assert len(consumed) == 300
    assert {len(line[4]) for line in consumed} == {20}
    per_queue: dict[str, list[int]] = {}
    for queue_id, offset, *_ in consumed:
        per_queue.setdefault(queue_id, []).append(int(offset))
    assert sorted(per_queue) == ["0", "1", "2", "3"]
    assert all(offsets == list(range(len(offsets))) for offsets in per_queue.values())


def test_group_progress_shows_lag_then_none_after_consuming(shared_broker: processes.ServerProcess) -> None:
    e = shared_broker.address
    ok("topic", "create", "Lagging", "--queues", "2", "--endpoints", e)
    ok("produce", "Lagging", "--count", "40", "--endpoints", e)
    wait_for_messages(e, "Lagging", 40)

    ok("consume", "Lagging", "--group", "etl", "--from", "earliest", "--max-messages", "10", "--endpoints", e)
    before = progress(e, "etl")
    ok("consume", "Lagging", "--group", "etl", "--idle-timeout", "2", "--endpoints", e)
    after = progress(e, "etl")

    # `rmq consume` is a group member: the group's retry topic is listed too (nothing to retry)
    queues = [q for q in before["queues"] if q["topic"] == "Lagging"]
    assert before["total_lag"] == 30
    assert sum(q["consumer_offset"] for q in queues) == 10
    assert [(q["queue_id"], q["max_offset"]) for q in queues] == [(0, 20), (1, 20)]
    assert set(queues[0]) == {"topic", "broker_name", "queue_id", "min_offset", "max_offset",
                              "consumer_offset", "lag"}
    assert after["total_lag"] == 0
    assert [(q["consumer_offset"], q["lag"]) for q in after["queues"] if q["topic"] == "Lagging"] == [
        (20, 0), (20, 0)]
    assert ok("group", "progress", "etl", "--endpoints", e).strip().splitlines()[-1] == "total lag: 0"


def test_progress_for_a_topic_lists_queues_never_consumed(shared_broker: processes.ServerProcess) -> None:
    e = shared_broker.address
    ok("topic", "create", "Untouched", "--queues", "2", "--endpoints", e)
    ok("produce", "Untouched", "--count", "6", "--endpoints", e)
    wait_for_messages(e, "Untouched", 6)

    shown = progress(e, "new-group", "--topic", "Untouched")

    assert [(q["consumer_offset"], q["lag"]) for q in shown["queues"]] == [(None, 3), (None, 3)]
    assert shown["total_lag"] == 6


def test_consume_filters_by_tag(shared_broker: processes.ServerProcess) -> None:
    e = shared_broker.address
    ok("topic", "create", "Tagged", "--queues", "1", "--endpoints", e)
    ok("produce", "Tagged", "--tags", "TagA", "--endpoints", e, stdin="a1\na2\n")
    ok("produce", "Tagged", "--tags", "TagB", "--endpoints", e, stdin="b1\nb2\n")

    consumed = consumed_lines(ok("consume", "Tagged", "--sub", "TagB", "--from", "earliest", "--max-messages",
                                 "2", "--endpoints", e))

    assert [(line[2], line[4]) for line in consumed] == [("TagB", "b1"), ("TagB", "b2")]


def test_consume_waits_for_messages_produced_later(shared_broker: processes.ServerProcess,
                                                   shared_metrics: str) -> None:
    e = shared_broker.address
    ok("topic", "create", "Later", "--queues", "2", "--endpoints", e)
    # Commit the group's position (the empty queues' ends) so the waiting consumer starts there.
    ok("consume", "Later", "--group", "waiter", "--idle-timeout", "0.5", "--endpoints", e)

    command = ["consume", "Later", "--group", "waiter", "--max-messages", "3", "--endpoints", e]
    waiting = subprocess.Popen(processes.RMQ + command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        wait_until(lambda: scrape(shared_metrics)["held_pulls"] == 3,   # both queues and the retry queue
                   lambda: f"the consumer's 3 pulls held ({scrape(shared_metrics)})", interval=0.05)
        ok("produce", "Later", "--endpoints", e, stdin="x\ny\nz\n")
        out, err = waiting.communicate(timeout=60)
    finally:
        waiting.kill()

    assert waiting.returncode == 0, err
    assert sorted(line[4] for line in consumed_lines(out)) == ["x", "y", "z"]


def test_through_a_name_server(tmp_path: Path, namesrv: processes.ServerProcess) -> None:
    server = processes.broker(tmp_path, namesrv_address=namesrv.address).start()
    try:
        e = namesrv.address
        deadline = time.monotonic() + 20
        create = ["topic", "create", "ViaNamesrv", "--queues", "2", "--endpoints", e]
        while "broker-a" not in rmq(*create).stdout:
            assert time.monotonic() < deadline, "the broker never registered with the name server"
            time.sleep(0.2)
        while rmq("topic", "describe", "ViaNamesrv", "--endpoints", e).returncode != 0:
            assert time.monotonic() < deadline, "the topic never reached the name server"
            time.sleep(0.2)

        assert ok("produce", "ViaNamesrv", "--count", "5", "--endpoints", e).strip() == (
            "sent 5 messages (acknowledged 5)")
        assert len(consumed_lines(ok("consume", "ViaNamesrv", "--from", "earliest", "--max-messages", "5",
                                     "--endpoints", e))) == 5

        # The broker re-registers at once (not at its next 30 s period): the route grows.
        ok("topic", "update", "ViaNamesrv", "--queues", "3", "--endpoints", e)
        deadline = time.monotonic() + 5
        while describe(e, "ViaNamesrv")["brokers"][0]["read_queue_nums"] != 3:
            assert time.monotonic() < deadline, "the grown topic never reached the name server"
            time.sleep(0.1)
    finally:
        server.stop()


def test_bad_input_gives_one_line_and_a_non_zero_exit(shared_broker: processes.ServerProcess) -> None:
    e = shared_broker.address
    ok("topic", "create", "Exists", "--queues", "1", "--endpoints", e)

    assert_one_line_error(rmq("produce", "--endpoints", e), "required: topic")
    assert_one_line_error(rmq("topic", "create", "X", "--queues", "0", "--endpoints", e), "--queues")
    assert_one_line_error(rmq("topic", "list", "--endpoints", "nohost"), "invalid endpoints 'nohost'")
    assert_one_line_error(rmq("topic", "create", "bad name!", "--queues", "1", "--endpoints", e),
                          "TOPIC_ILLEGAL")
    for unknown in (["topic", "describe", "Nope"], ["produce", "Nope", "--count", "1"], ["consume", "Nope"],
                    ["topic", "delete", "Nope"], ["topic", "update", "Nope", "--queues", "2"],
                    ["group", "progress", "g", "--topic", "Nope"]):
        assert_one_line_error(rmq(*unknown, "--endpoints", e), "TOPIC_NOT_EXIST")
    assert_one_line_error(rmq("group", "progress", "nobody", "--endpoints", e), "no committed offsets")


def test_broker_down_gives_one_line_naming_the_address(broker: processes.ServerProcess) -> None:
    ok("topic", "create", "Gone", "--queues", "1", "--endpoints", broker.address)
    broker.stop()

    for command in (["topic", "list"], ["produce", "Gone", "--count", "1"], ["consume", "Gone"],
                    ["group", "progress", "g"]):
        assert_one_line_error(rmq(*command, "--endpoints", broker.address), "cannot reach", broker.address)
