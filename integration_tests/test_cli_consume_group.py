"""`rmq consume` as a consumer group member, as a new user runs it (issue 13's defects):
three processes of one group share a topic and print every message once, `| head -3`
commits 3 offsets, SIGTERM commits what was printed, a broker restart is ridden out,
`--json` carries binary bodies as base64, `--sql` errors name the position, and the
`group list`, `topic create --if-not-exists` and `produce --key-hash` commands."""

from __future__ import annotations

import contextlib
import io
import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration_tests.reliability.resource_samples import scrape
from integration_tests.test_cli import assert_one_line_error, ok
from rmq.cli.main import main as cli_main
from rmq.connector.client import OutgoingMessage, RmqClient, RmqError
from testing import processes
from tests.waiting import wait_until

pytestmark = pytest.mark.integration
WAIT_S = 60.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[processes.ServerProcess]:
    server = processes.broker(tmp_path_factory.mktemp("cli-group")).start()
    yield server
    server.stop()


def rmq(*args: str) -> subprocess.CompletedProcess[str]:
    """`rmq ARGS` run in this process (no interpreter start-up): the commands that need no stdin."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(args))
    return subprocess.CompletedProcess(["rmq", *args], code, out.getvalue(), err.getvalue())


def run(*args: str) -> str:
    done = rmq(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


def progress(endpoints: str, group: str) -> dict:
    return json.loads(run("group", "progress", group, "--json", "--endpoints", endpoints))


class Consume:
    """`rmq consume` in the background, its stdout in a file (not a pipe)."""

    def __init__(self, path: Path, *args: str) -> None:
        self.path = path
        with open(path, "wb") as out:
            self.process = subprocess.Popen(processes.RMQ + ["consume", *args], stdout=out,
                                            stderr=subprocess.PIPE, text=True)

    def lines(self) -> list[str]:
        return self.path.read_text().splitlines()

    def wait_lines(self, count: int) -> list[str]:
        deadline = time.monotonic() + WAIT_S
        while len(self.lines()) < count:
            assert self.process.poll() is None, self.process.stderr.read() if self.process.stderr else ""
            assert time.monotonic() < deadline, f"{len(self.lines())} of {count} lines"
            time.sleep(0.1)
        return self.lines()

    def terminate(self) -> str:
        self.process.send_signal(signal.SIGTERM)
        return self.wait()

    def kill(self) -> None:
        """However the test ended: no process left behind."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()

    def wait(self) -> str:
        _, err = self.process.communicate(timeout=WAIT_S)
        assert self.process.returncode == 0, err
        assert "Traceback" not in err
        return err


def committed(endpoints: str, group: str, topic: str) -> int:
    return sum(q["consumer_offset"] or 0 for q in progress(endpoints, group)["queues"] if q["topic"] == topic)


def members(endpoints: str, group: str) -> list[str]:
    with RmqClient(endpoints) as client:
        try:
            return client.consumer_list(group, f"%RETRY%{group}")
        except RmqError:   # no retry topic before the first member heartbeats
            return []


def group_entry(endpoints: str, group: str) -> dict:
    groups = json.loads(run("group", "list", "--json", "--endpoints", endpoints))["groups"]
    return next(g for g in groups if g["group"] == group)


def test_three_processes_of_a_group_share_a_topic(broker: processes.ServerProcess, tmp_path: Path) -> None:
    e = broker.address
    run("topic", "create", "Shared", "--queues", "8", "--endpoints", e)
    consumers = [Consume(tmp_path / f"c{i}.out", "Shared", "--group", "g3", "--from", "first",
                         "--json", "--endpoints", e) for i in range(3)]
    try:
        wait_until(lambda: len(members(e, "g3")) == 3, "all three joined (the queues move at each join)",
                   timeout=WAIT_S, interval=0.2)
        # and rebalanced: while a queue changes hands both may read it (at-least-once). Each member
        # hears of the join at once (membership push) but its allocation is not visible outside its
        # process (the command logs no rebalance): this margin stays until it is.
        time.sleep(2.0)
        run("produce", "Shared", "--count", "300", "--endpoints", e)
        deadline = time.monotonic() + WAIT_S
        while sum(len(c.lines()) for c in consumers) < 300 and time.monotonic() < deadline:
            time.sleep(0.2)
        listed = group_entry(e, "g3")
        assert (len(listed["members"]), listed["topics"]) == (3, ["Shared"])
        # Stop once every printed message is committed (each member commits every 5 s): the first
        # to stop hands its queues to the others, and a queue moving between two live members is
        # read again from its committed offset (RocketMQ's at-least-once rebalance; --orderly's
        # queue locks close that window) — before this wait, a member that had printed messages it
        # had not committed yet lost its queues to another when the first member stopped.
        deadline = time.monotonic() + WAIT_S
        while committed(e, "g3", "Shared") < 300:
            assert time.monotonic() < deadline, f"{committed(e, 'g3', 'Shared')} of 300 committed"
            time.sleep(0.2)
        for consumer in consumers:
            consumer.process.send_signal(signal.SIGTERM)
        for consumer in consumers:
            consumer.wait()
        assert group_entry(e, "g3") == {"group": "g3", "members": [], "topics": ["Shared"], "total_lag": 0}
        records = [json.loads(line) for c in consumers for line in c.lines()]
        bodies = Counter(r["body"] for r in records)
        assert len(bodies) == 300 and set(bodies.values()) == {1}   # every message once
        assert all(sum(1 for line in c.lines()) > 0 for c in consumers)   # each one had queues
        assert progress(e, "g3")["total_lag"] == 0
    finally:
        for consumer in consumers:
            consumer.kill()


def test_head_commits_only_what_it_read_and_sigterm_commits_what_was_printed(
        broker: processes.ServerProcess, tmp_path: Path) -> None:
    e = broker.address
    run("topic", "create", "Headed", "--queues", "2", "--endpoints", e)
    run("produce", "Headed", "--count", "40", "--endpoints", e)
    command = " ".join(processes.RMQ + ["consume", "Headed", "--group", "heads", "--from", "first",
                                        "--endpoints", e])
    shown = subprocess.run(f"{command} | head -3", shell=True, capture_output=True, text=True, timeout=WAIT_S)
    assert len(shown.stdout.splitlines()) == 3
    assert "Traceback" not in shown.stderr
    assert committed(e, "heads", "Headed") == 3

    consumer = Consume(tmp_path / "rest.out", "Headed", "--group", "heads", "--endpoints", e)
    assert len(consumer.wait_lines(37)) == 37          # the rest, from where head stopped
    err = consumer.terminate()                          # what `timeout`, docker and systemd send
    assert "consumed 37 messages" in err
    assert committed(e, "heads", "Headed") == 40


def test_rides_out_a_broker_restart(tmp_path: Path) -> None:
    metrics = f"127.0.0.1:{processes.free_port()}"
    server = processes.broker(tmp_path, extra=["--metrics-listen", metrics]).start()
    e = server.address
    client = RmqClient(e)
    consumer = None
    try:
        run("topic", "create", "Restarted", "--queues", "2", "--endpoints", e)
        consumer = Consume(tmp_path / "ride.out", "Restarted", "--group", "riders", "--endpoints", e)
        # joined, pulling from the (empty) ends: both queues and the group's retry queue
        wait_until(lambda: scrape(metrics)["held_pulls"] == 3, "the consumer's 3 pulls held",
                   timeout=WAIT_S, interval=0.05)
        client.send("Restarted", [OutgoingMessage(b"a"), OutgoingMessage(b"b")])
        consumer.wait_lines(2)
        server.restart()                                # younger than the 5 s commit period
        client.send("Restarted", [OutgoingMessage(b"c"), OutgoingMessage(b"d")])
        lines = consumer.wait_lines(4)
        consumer.terminate()
        assert sorted(line.split(" ", 4)[4] for line in lines) == ["a", "b", "c", "d"]
        assert committed(e, "riders", "Restarted") == 4
    finally:
        if consumer is not None:
            consumer.kill()
        client.close()
        server.stop()


def test_json_bodies_keys_and_selectors(broker: processes.ServerProcess) -> None:
    e = broker.address
    assert "created" in run("topic", "create", "Keyed", "--queues", "4", "--if-not-exists", "--endpoints", e)
    assert run("topic", "create", "Keyed", "--queues", "2", "--if-not-exists", "--endpoints", e).strip() == (
        "topic Keyed exists with 4 queues on broker-a")
    lines = "".join(f"order-{i % 3}\tstep {i // 3}\n" for i in range(12)) + "bin\t\xff\xfe\n"
    done = subprocess.run(processes.RMQ + ["produce", "Keyed", "--key-hash", "--endpoints", e],
                          input=lines.encode("latin-1"), capture_output=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    out = ok("consume", "Keyed", "--group", "keyed", "--from", "first", "--max-messages", "13", "--json",
             "--endpoints", e)
    records = [json.loads(line) for line in out.splitlines()]
    queues: dict[str, set[int]] = {}
    for record in records:
        queues.setdefault(record["keys"], set()).add(record["queue_id"])
    assert all(len(ids) == 1 for ids in queues.values()) and len(queues) == 4   # one queue per key
    steps = [r["body"] for r in sorted(records, key=lambda r: r["queue_offset"]) if r["keys"] == "order-1"]
    assert steps == [f"step {i}" for i in range(4)]                             # in order
    binary = next(r for r in records if r["keys"] == "bin")
    assert (binary["body"], binary["body_encoding"]) == ("//4=", "base64")
    assert {r["body_encoding"] for r in records if r["keys"] != "bin"} == {"utf-8"}

    time.sleep(0.05)   # not an event: the clock moves past what was stored before
    since = int(time.time() * 1000)
    with RmqClient(e) as client:
        client.send("Keyed", [OutgoingMessage(b"late", keys="later")])
    out = ok("consume", "Keyed", "--group", "stamped", "--from", f"timestamp:{since}", "--max-messages", "1",
             "--json", "--endpoints", e)
    assert [json.loads(line)["body"] for line in out.splitlines()] == ["late"]   # nothing stored before

    assert_one_line_error(rmq("consume", "Keyed", "--sql", "a >", "--endpoints", e), "--sql", "position")
    both = rmq("consume", "Keyed", "--sql", "a > 1", "--sub", "TagA", "--endpoints", e)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
