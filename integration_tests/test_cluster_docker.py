"""docker-compose.yml for real: the image built from our Dockerfile, a three-member etcd, two name
servers embedding the controllers, broker-a with its slave (controller mode), broker-b, Spark master
and worker, topic-init, the producer and the ETL job, checked for what a user of the compose file
relies on, last a failover (the leading controller and broker-a's master killed). `make compose-
test` (scripts/compose_test.sh) gets a Docker engine, Compose v2 and a base image on a machine
without an image registry and runs this file (CI does, after `make test`, which leaves it out). Run
on its own, it is skipped with the reason where no Docker engine answers; with RMQ_REQUIRE_DOCKER=1
(the script) it fails instead. `test_cluster.py` runs the same topology as local processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.docker]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENDPOINTS = "namesrv:9876,namesrv-2:9876"
TOPIC = "orders"
PRODUCED = 100_000    # the producer service's --count
STEP_MS = 100         # ... and --step-ms: the events span 10,000 s of event time
ETL_GROUP = "rmq-streaming-etl"
ETL_OUTPUT = "/data/orders_per_minute"
# Windows of 1 minute are written once the watermark (newest event - 1 minute) passed their end:
# the events of the last two minutes of event time are never written (a third for the edges).
UNWRITTEN_AT_MOST = 3 * 60_000 // STEP_MS
SERVERS = ("etcd-0", "etcd-1", "etcd-2", "namesrv", "namesrv-2", "broker-a", "broker-a-slave", "broker-b")
FAILOVER_GOAL_S = 10.0   # issue 44: a new master acknowledges within this (measured here with
# container start-ups in the loop, so the test records the figure and bounds it loosely)
FAILOVER_BOUND_S = 180.0


def docker_unavailable() -> str | None:
    """Why the Docker variant cannot run here, or None when it can."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True)
    if info.returncode != 0:
        detail = (info.stderr.strip().splitlines() or ["no output"])[-1]
        return f"no Docker engine answers `docker info` ({detail})"
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0:
        return "`docker compose` (the Compose v2 plugin) is not available"
    return None


def ephemeral_ports() -> dict[str, str]:
    """Every host-port variable of docker-compose.yml set to "": Docker picks free ports, so the
    test does not depend on 9876, 10911, ... being free on the host (the test's clients run inside
    the compose network and use none of them)."""
    with open(os.path.join(ROOT, "docker-compose.yml")) as compose_file:
        return {variable: "" for variable in re.findall(r"\$\{(RMQ_\w+_PORT)-\d+\}", compose_file.read())}


class ComposeError(Exception):
    """A `docker compose` command exited non-zero."""


@dataclass(frozen=True)
class Compose:
    """`docker compose` on our docker-compose.yml, run from the repository root."""

    def __call__(self, *words: str, timeout: float = 900, exit_codes: tuple[int, ...] = (0,)) -> str:
        env = os.environ | ephemeral_ports()
        done = subprocess.run(["docker", "compose", *words], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout, env=env)
        if done.returncode not in exit_codes:
            raise ComposeError(f"docker compose {' '.join(words)}:\n{done.stdout}{done.stderr}")
        return done.stdout

    def client(self, *words: str, exit_codes: tuple[int, ...] = (0,)) -> str:
        """A command in a new container of the `cli` service: a client inside the network."""
        return self("run", "--rm", "--no-deps", "-T", "cli", *words, exit_codes=exit_codes)

    def rmq_json(self, *words: str, exit_codes: tuple[int, ...] = (0,)) -> dict:
        answer = self.client("rmq", *words, "--endpoints", ENDPOINTS, "--json", exit_codes=exit_codes)
        return json.loads(answer)

    def cluster(self) -> dict:
        """`rmq cluster --json`, also while a member is down (it then exits 1: "complete": false)."""
        return self.rmq_json("cluster", exit_codes=(0, 1))

    def state(self, service: str) -> dict:
        """The service's (one) container as `docker compose ps --all` sees it."""
        return json.loads(self("ps", "--all", "--format", "json", service).splitlines()[0])


@pytest.fixture(scope="module")
def compose() -> Iterator[Compose]:
    reason = docker_unavailable()
    if reason:
        if os.environ.get("RMQ_REQUIRE_DOCKER") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    compose = Compose()
    try:
        # not --wait: compose fails it once a one-shot service (topic-init, producer) exits, even with 0
        compose("up", "--detach", "--build")
        yield compose
    finally:
        compose("down", "--volumes", "--remove-orphans", "--timeout", "10")


def wait_until(check: Callable[[], bool], what: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(2)


def finished(compose: Compose, service: str) -> bool:
    """The one-shot service has exited, with status 0."""
    state = compose.state(service)
    if state["State"] != "exited":
        return False
    assert state["ExitCode"] == 0, compose("logs", service)
    return True


def queue_offsets(compose: Compose) -> dict[tuple[str, int], tuple[int, int]]:
    queues = compose.rmq_json("topic", "describe", TOPIC)["queues"]
    return {(q["broker_name"], q["queue_id"]): (q["min_offset"], q["max_offset"]) for q in queues}


def broker_a_members(compose: Compose) -> dict[str, dict]:
    return {m["role"]: m for m in compose.cluster()["brokers"]["broker-a"]}


def brokers_registered(compose: Compose) -> bool:
    """All three brokers are in the name server's routes and answer."""
    brokers = compose.cluster()["brokers"]
    members = [m for group in brokers.values() for m in group]
    return set(brokers) == {"broker-a", "broker-b"} and len(members) == 3 \
        and all(m["state"] == "ok" for m in members)


def slave_caught_up(compose: Compose) -> bool:
    members = broker_a_members(compose)
    slave, master = members.get("SLAVE"), members.get("SYNC_MASTER")
    return slave is not None and master is not None and slave["state"] == "ok" \
        and slave["lag_bytes"] == 0 and slave["max_offset"] == master["max_offset"]


def group_progress(compose: Compose) -> dict:
    return compose.rmq_json("group", "progress", ETL_GROUP)


def committed_offsets(compose: Compose) -> dict[tuple[str, str, int], int | None]:
    return {(q["topic"], q["broker_name"], q["queue_id"]): q["consumer_offset"]
            for q in group_progress(compose)["queues"]}


def etl_caught_up(compose: Compose) -> bool:
    try:
        return group_progress(compose)["total_lag"] == 0
    except ComposeError:   # `rmq group progress` refuses a group that committed nothing yet
        return False


# The orders the ETL job's file sink committed: the Parquet files its log (_spark_metadata/<batch>
# and <batch>.compact: "v1", then one JSON entry a line, each adding a file) lists, not whatever
# lies in the directory, where a file is visible while it is being written.
COMMITTED_ORDERS = f"""
import json, os, pyarrow.parquet as pq
log = '{ETL_OUTPUT}/_spark_metadata'
files = set()
for name in sorted(os.listdir(log)) if os.path.isdir(log) else []:
    if name.split('.')[0].isdigit():
        for line in open(os.path.join(log, name)).read().splitlines()[1:]:
            files.add(json.loads(line)['path'].removeprefix('file:'))
print(sum(sum(pq.read_table(path, columns=['orders'])['orders'].to_pylist()) for path in files))
"""


def orders_written(compose: Compose) -> int:
    """The orders counted in the ETL job's committed output (its `orders` column summed), read in
    a container of its own on the etl-data volume."""
    return int(compose("run", "--rm", "--no-deps", "-T", "etl-job", "python", "-c", COMMITTED_ORDERS))


def test_topic_init_creates_orders_with_4_queues_on_each_broker(compose):
    wait_until(lambda: finished(compose, "topic-init"), "topic-init")
    assert sorted(queue_offsets(compose)) == [(broker, queue) for broker in ("broker-a", "broker-b")
                                              for queue in range(4)]


def test_the_producer_fills_the_queues_of_both_brokers(compose):
    wait_until(lambda: finished(compose, "producer"), "the producer")
    offsets = queue_offsets(compose)
    assert sum(high - low for low, high in offsets.values()) == PRODUCED
    assert all(high > low for low, high in offsets.values())


def test_the_slave_follows_its_master(compose):
    wait_until(lambda: finished(compose, "producer"), "the producer")
    wait_until(lambda: slave_caught_up(compose), "broker-a-slave to catch up with broker-a")
    assert broker_a_members(compose)["SLAVE"]["max_offset"] > 0


@pytest.mark.timeout(1200)   # Spark on the shared 2-core machine: 9 min once under other engineers' load
def test_the_etl_job_writes_the_produced_orders_and_its_group_catches_up(compose):
    wait_until(lambda: finished(compose, "producer"), "the producer")
    wait_until(lambda: etl_caught_up(compose), "the ETL job's consumer group to catch up (lag 0)")
    wait_until(lambda: orders_written(compose) >= PRODUCED - UNWRITTEN_AT_MOST,
               "the ETL job's Parquet output to count the produced orders")
    assert orders_written(compose) <= PRODUCED


def test_down_then_up_keeps_messages_offsets_and_output(compose):
    """The stores, the consumer offsets and the Parquet output live in named volumes."""
    wait_until(lambda: etl_caught_up(compose), "the ETL job's consumer group to catch up")
    compose("stop", "etl-job")   # from here on its output and offsets stay as they are
    offsets, committed, written = queue_offsets(compose), committed_offsets(compose), orders_written(compose)
    compose("down", "--timeout", "30")
    compose("up", "--detach", "--wait", *SERVERS)
    wait_until(lambda: brokers_registered(compose), "the brokers to register again")
    assert queue_offsets(compose) == offsets
    assert committed_offsets(compose) == committed
    wait_until(lambda: slave_caught_up(compose), "broker-a-slave to catch up after the restart")
    assert orders_written(compose) == written


def broker_a_by_address(compose: Compose) -> dict[str, dict]:
    return {m["address"]: m for m in compose.cluster()["brokers"].get("broker-a", [])}


def the_slave_acknowledges_as_master(compose: Compose, epoch: int) -> bool:
    """broker-a-slave answers as SYNC_MASTER of a newer epoch and stores sends (sent to it directly,
    so broker-b cannot take them; alone in the SyncStateSet it answers them SLAVE_NOT_AVAILABLE,
    "stored on the master only", which `rmq produce` counts as acknowledged)."""
    member = broker_a_by_address(compose).get("broker-a-slave:10911")
    if member is None or member["role"] != "SYNC_MASTER" or member.get("epoch", 0) <= epoch:
        return False
    try:
        compose.client("rmq", "produce", TOPIC, "--count", "10", "--retry-timeout", "5",
                       "--endpoints", "broker-a-slave:10911")
    except ComposeError:
        return False
    return True


@pytest.mark.timeout(1200)
def test_killing_the_leading_controller_and_the_master_elects_the_slave(compose):
    """kill -9 of the leading controller and broker-a's master together: the other controller
    takes the lead and elects broker-a-slave, which stores sends; `rmq cluster` names the new
    leader, the new epoch and SyncStateSet, and never shows the dead master as a live master;
    broker-a, started again, rejoins as the slave of the new master and catches up, and sends are
    then answered SEND_OK (replicated) again."""
    wait_until(lambda: brokers_registered(compose), "the brokers to be registered")
    wait_until(lambda: slave_caught_up(compose), "broker-a-slave to catch up before the failover")
    before = compose.cluster()["controller"]
    leader = before["leader"].rpartition(":")[0]
    assert leader in ("namesrv", "namesrv-2")
    epoch = next(g["epoch"] for g in before["groups"] if g["broker_name"] == "broker-a")
    killed_at = time.monotonic()
    compose("kill", "--signal", "SIGKILL", leader, "broker-a")
    wait_until(lambda: the_slave_acknowledges_as_master(compose, epoch),
               "broker-a-slave to be elected and acknowledge", timeout=FAILOVER_BOUND_S)
    failover_s = time.monotonic() - killed_at
    print(f"[compose] leading controller {leader} + master killed: broker-a-slave acknowledged after "
          f"{failover_s:.1f} s (goal {FAILOVER_GOAL_S:.0f} s; container start-ups included)")
    shown = compose.cluster()
    assert shown["controller"]["leader"] != before["leader"]
    group = next(g for g in shown["controller"]["groups"] if g["broker_name"] == "broker-a")
    assert (group["epoch"], group["master_id"], sorted(group["in_sync_ids"])) == (epoch + 1, 1, [1])
    old = next((m for m in shown["brokers"]["broker-a"] if m["address"] == "broker-a:10911"), None)
    assert old is None or (old["role"] == "?" and old["state"].startswith("unreachable")), old
    compose("start", leader, "broker-a")
    wait_until(lambda: (broker_a_by_address(compose).get("broker-a:10911") or {}).get("role") == "SLAVE",
               "broker-a to rejoin as a slave")
    wait_until(lambda: slave_caught_up(compose), "broker-a to catch up with the new master")
    wait_until(lambda: sorted(next(g for g in compose.cluster()["controller"]["groups"]
                                   if g["broker_name"] == "broker-a")["in_sync_ids"]) == [0, 1],
               "broker-a back in the SyncStateSet")
    answer = compose.client("rmq", "produce", TOPIC, "--count", "10", "--endpoints", "broker-a-slave:10911")
    assert "acknowledged 10)" in answer and "master only" not in answer, answer
