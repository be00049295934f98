"""Scenario 11 (controller mode): automatic failover under the controller (docs/controller.md,
docs/controller.md) with real processes: `rmq namesrv --controller` and a SYNC_MASTER broker
group of two members started with --controller, producers sending through the name server.

The master is killed with SIGKILL under the producers: the controller elects the slave, the
producers follow the new route without a restart, and every message acknowledged with OK,
before the kill or after it, is read back at the queue offset its acknowledgement named. The
time without a master (from the kill to the first acknowledgement by the new master) is
reported. The old master, started again on its own store, learns the new epoch, drops what it
wrote that the new master never held and rejoins as slave: it ends with exactly the new
master's CommitLog. The same with the old master's store deleted before it returns.
"""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from integration_tests.reliability.report import ReliabilityReport, tally
from integration_tests.reliability.traffic import StoredMessage, gaps_and_repeats, read_topic
from integration_tests.test_metrics import scrape, value
from rmq.connector.client import OutgoingMessage, RmqClient, RmqUnavailable
from rmq.connector.errors import RmqError
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from testing import processes

pytestmark = pytest.mark.integration

TOPIC = "failover"
GROUP = "c1"
QUEUES = 4
FAILOVER_TIMEOUT_MS = 3000   # the default: a busy 2-core machine must not fail a live master over
NAMESRV_SETTINGS = {"controller_failover_timeout_ms": FAILOVER_TIMEOUT_MS, "controller_scan_interval_ms": 200}
BROKER_SETTINGS = {"controller_heartbeat_interval_ms": 500, "slave_synchronize_interval_ms": 300,
                   "store": {"mapped_file_size_commit_log": 1 << 20, "sync_flush_timeout_ms": 1000}}
WAIT_S = 60.0


def status(member: processes.ServerProcess) -> rmq_pb2.BrokerStatusResponse:
    with grpc.insecure_channel(member.address) as channel:
        return rmq_pb2_grpc.AdminServiceStub(channel).GetBrokerStatus(rmq_pb2.BrokerStatusRequest(),
                                                                       timeout=5)


def wait(condition, what: str) -> None:
    """Until condition() holds; a member not answering yet counts as not yet."""
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            if condition():
                return
        except (RmqUnavailable, grpc.RpcError):
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


@dataclass
class ControlledGroup:
    namesrv: processes.ServerProcess
    members: list[processes.ServerProcess]
    store_root: Path
    metrics: list[str]      # each member's scrape address (--metrics-listen)

    def store(self, broker_id: int) -> Path:
        return self.store_root / f"{GROUP}-{broker_id}"

    def wait_in_sync(self, master: int, slave: int) -> None:
        """`slave` replicates from `master`, is in its in-sync set and has copied every byte."""
        wait(lambda: status(self.members[slave]).role == rmq_pb2.SLAVE
             and slave in status(self.members[master]).in_sync_ids, f"id {slave} in sync with id {master}")
        wait(lambda: status(self.members[slave]).commit_log_max_offset
             == status(self.members[master]).commit_log_max_offset, f"id {slave} to catch up")


@contextmanager
def controlled_group(tmp_path: Path) -> Iterator[ControlledGroup]:
    (tmp_path / "namesrv.json").write_text(json.dumps(NAMESRV_SETTINGS))
    (tmp_path / "broker.json").write_text(json.dumps(BROKER_SETTINGS))
    namesrv = processes.namesrv(tmp_path, ["--controller", "--controller-dir", str(tmp_path / "controller"),
                                           "--config", str(tmp_path / "namesrv.json")]).start()
    metrics = [f"127.0.0.1:{processes.free_port()}" for _ in range(2)]
    flags = ["--controller", namesrv.address, "--config", str(tmp_path / "broker.json")]
    members = [processes.group_member(tmp_path, GROUP, broker_id, "SYNC_MASTER", namesrv.address,
                                      extra=[*flags, "--metrics-listen", metrics[broker_id]])
               for broker_id in (0, 1)]
    try:
        members[0].start()
        wait(lambda: status(members[0]).role == rmq_pb2.SYNC_MASTER, "id 0 to be master")
        members[1].start()
        with closing(RmqClient(namesrv.address)) as admin:
            admin.create_topic(TOPIC, queues=QUEUES)
        group = ControlledGroup(namesrv, members, tmp_path, metrics)
        group.wait_in_sync(master=0, slave=1)
        yield group
    finally:
        for server in (*members, namesrv):
            server.stop()


@dataclass(frozen=True)
class Ack:
    """One acknowledged message: when, with which status (OK: a slave holds it too;
    FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE: stored on the answering master only), and the
    port of the member that stored it (from its offset message id)."""

    at: float
    status: int
    stored_by: int
    message: StoredMessage


@dataclass
class Acknowledgements:
    sent: int = 0
    acks: list[Ack] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, status: int | None = None) -> int:
        with self.lock:
            return sum(1 for ack in self.acks if status is None or ack.status == status)

    def wait_for(self, count: int, status: int | None = None) -> None:
        deadline = time.monotonic() + WAIT_S
        while self.count(status) < count:
            assert time.monotonic() < deadline, f"producers stalled at {self.count(status)} acknowledged"
            time.sleep(0.02)

    def must_be_readable(self, new_master: processes.ServerProcess) -> list[StoredMessage]:
        """Every message acknowledged OK, and every message the new master stored."""
        port = _port(new_master.address)
        return [ack.message for ack in self.acks if ack.status == rmq_pb2.OK or ack.stored_by == port]

    def first_stored_by(self, member: processes.ServerProcess) -> float:
        return min(ack.at for ack in self.acks if ack.stored_by == _port(member.address))


def _port(address: str) -> int:
    return int(address.rpartition(":")[2])


@contextmanager
def producing(endpoints: str, threads: int = 3, batch: int = 32) -> Iterator[Acknowledgements]:
    """`threads` producers sending batches through the name server's routes until the end."""
    acks = Acknowledgements()
    stop = threading.Event()

    def run(producer: int) -> None:
        with closing(RmqClient(endpoints, timeout=5.0)) as client:
            for number in itertools.count():
                if stop.is_set():
                    return
                bodies = [f"p{producer}-b{number}-m{i}".encode() for i in range(batch)]
                try:
                    result = client.send(TOPIC, [OutgoingMessage(body) for body in bodies])
                except RmqError:   # not acknowledged
                    time.sleep(0.05)
                    continue
                finally:
                    with acks.lock:
                        acks.sent += batch
                now = time.monotonic()
                stored = [Ack(now, result.status, int(msg_id[8:16], 16), StoredMessage(q, o, b))
                          for msg_id, q, o, b in zip(result.msg_ids, result.queue_ids, result.queue_offsets,
                                                     bodies, strict=True)]
                with acks.lock:
                    acks.acks += stored

    workers = [threading.Thread(target=run, args=(n,), daemon=True) for n in range(threads)]
    for worker in workers:
        worker.start()
    try:
        yield acks
    finally:
        stop.set()
        for worker in workers:
            worker.join(30)


def fail_over(group: ControlledGroup, delete_store: bool = False, pause_slave: bool = False
              ) -> tuple[Acknowledgements, float]:
    """Producers run; id 0 is killed with SIGKILL (its store deleted too when asked; after
    it stored batches that the slave, paused with SIGSTOP, never received, when asked) and
    producing goes on until 1,000 more messages are acknowledged. Returns the
    acknowledgements and the seconds without a master."""
    with producing(group.namesrv.address) as acks:
        acks.wait_for(3000)
        if pause_slave:
            group.members[1].process.send_signal(signal.SIGSTOP)
            acks.wait_for(3 * 32, rmq_pb2.FLUSH_SLAVE_TIMEOUT)
        group.members[0].kill()
        if pause_slave:
            group.members[1].process.send_signal(signal.SIGCONT)
        killed_at = time.monotonic()
        if delete_store:
            shutil.rmtree(group.store(0))
        before = acks.count()
        acks.wait_for(before + 1000)
    return acks, acks.first_stored_by(group.members[1]) - killed_at


def commit_log_bytes(store: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted((store / "commitlog").iterdir())).rstrip(b"\0")


@pytest.mark.parametrize("delete_store", [False, True], ids=["store kept", "store deleted"])
def test_the_slave_takes_over_within_seconds_and_no_acknowledged_message_is_lost(
        tmp_path: Path, report: ReliabilityReport, delete_store: bool) -> None:
    with controlled_group(tmp_path) as group:
        acks, without_master_s = fail_over(group, delete_store)
        new_master = status(group.members[1])
        with closing(RmqClient(group.namesrv.address)) as reader:
            read = read_topic(reader, TOPIC)
        group.members[0].start()    # the old master returns on its store (or an empty one)
        group.wait_in_sync(master=1, slave=0)
        returned = status(group.members[0])
        for member in group.members:
            member.stop()
        old_log, new_log = commit_log_bytes(group.store(0)), commit_log_bytes(group.store(1))
    acknowledged = acks.must_be_readable(group.members[1])
    figures = report.record(tally(
        f"11 controller failover, SYNC_MASTER kill -9{' + store deleted' if delete_store else ''} "
        f"(3 producers, failover timeout {FAILOVER_TIMEOUT_MS} ms)", acks.sent,
        (m.body for m in acknowledged), (m.body for m in read),
        notes="every (queue, offset, body) acknowledged OK or stored by the new master (alone: "
              "SLAVE_NOT_AVAILABLE) read back; the returning master ends with the new master's CommitLog",
        without_master_s=f"{without_master_s:.2f}", ok=acks.count(rmq_pb2.OK)))
    read_set = set(read)
    missing = [m for m in acknowledged if m not in read_set]
    assert missing == [], f"{len(missing)} acknowledged messages not readable: {missing[:3]}"
    assert figures.lost == 0 and figures.duplicated == 0
    assert gaps_and_repeats(read) == ([], [])
    assert (new_master.role, new_master.epoch) == (rmq_pb2.SYNC_MASTER, 2)
    assert (returned.role, returned.epoch, returned.replication_error) == (rmq_pb2.SLAVE, 2, "")
    assert old_log == new_log


def test_what_the_old_master_stored_while_the_slave_was_paused_is_dropped_when_it_returns(
        tmp_path: Path, report: ReliabilityReport) -> None:
    """The slave is paused (SIGSTOP: the master's sends time out, FLUSH_SLAVE_TIMEOUT, stored on
    the master only), the master is killed, the slave resumes and is elected: the old master
    returns with those batches beyond the new epoch's start, drops them and rejoins."""
    with controlled_group(tmp_path) as group:
        acks, without_master_s = fail_over(group, pause_slave=True)
        with closing(RmqClient(group.namesrv.address)) as reader:
            read = read_topic(reader, TOPIC)
        epoch_2_start = json.loads((tmp_path / "controller" / "controller.json").read_text()
                                   )["groups"][GROUP]["epoch_starts"]["2"]
        held_before_return = len(commit_log_bytes(group.store(0)))
        group.members[0].start()
        group.wait_in_sync(master=1, slave=0)
        for member in group.members:
            member.stop()
        old_log, new_log = commit_log_bytes(group.store(0)), commit_log_bytes(group.store(1))
    acknowledged = acks.must_be_readable(group.members[1])
    figures = report.record(tally(
        f"11 controller failover, slave paused (SIGSTOP) then master kill -9 (3 producers, failover timeout "
        f"{FAILOVER_TIMEOUT_MS} ms)", acks.sent, (m.body for m in acknowledged), (m.body for m in read),
        notes="every acknowledged (queue, offset, body) read back; the batches stored on the old master "
              "only (FLUSH_SLAVE_TIMEOUT) dropped when it rejoined",
        without_master_s=f"{without_master_s:.2f}", master_only=acks.count(rmq_pb2.FLUSH_SLAVE_TIMEOUT),
        dropped_bytes=held_before_return - epoch_2_start))
    assert figures.lost == 0 and figures.duplicated == 0
    assert gaps_and_repeats(read) == ([], [])
    assert held_before_return > epoch_2_start
    assert old_log == new_log


def test_both_members_killed_and_restarted_at_once_keep_every_acknowledged_message(
        tmp_path: Path, report: ReliabilityReport) -> None:
    with controlled_group(tmp_path) as group:
        with producing(group.namesrv.address) as acks:
            acks.wait_for(3000)
            for member in group.members:
                member.kill()
        with ThreadPoolExecutor(2) as pool:   # both started together, each waiting to answer
            list(pool.map(lambda member: member.start(), group.members))
        wait(lambda: sorted(status(m).role for m in group.members) == [rmq_pb2.SYNC_MASTER, rmq_pb2.SLAVE],
             "one master and one slave")
        master = 0 if status(group.members[0]).role == rmq_pb2.SYNC_MASTER else 1
        group.wait_in_sync(master=master, slave=1 - master)
        with closing(RmqClient(group.namesrv.address)) as reader:
            read = read_topic(reader, TOPIC)
        for member in group.members:
            member.stop()
        old_log, new_log = commit_log_bytes(group.store(0)), commit_log_bytes(group.store(1))
    acknowledged = [ack.message for ack in acks.acks if ack.status == rmq_pb2.OK]
    figures = report.record(tally(
        "11 controller mode, both members kill -9 and restarted at once (3 producers)", acks.sent,
        (m.body for m in acknowledged), (m.body for m in read),
        notes=f"id {master} master afterwards; every OK-acknowledged (queue, offset, body) read back, both "
              f"CommitLogs equal"))
    assert figures.lost == 0 and figures.duplicated == 0
    assert gaps_and_repeats(read) == ([], [])
    assert old_log == new_log


@pytest.mark.xfail(strict=False, reason="known race, issue #31 stays open: about 1 run in 8 on a loaded "
                   "machine, one batch the new master stored is not read back after the old master rejoins "
                   "(closing note of the third release's first stop)")
def test_a_master_paused_beyond_the_failover_timeout_is_fenced_and_rejoins_as_slave(
        tmp_path: Path, report: ReliabilityReport) -> None:
    """SIGSTOP of the master: the slave is elected; the old master, resumed, learns the new
    epoch at its next heartbeat, refuses writes, drops what it stored meanwhile (never OK:
    its slave had left) and rejoins; OK acknowledgements come back once it confirms again."""
    with controlled_group(tmp_path) as group:
        old, new = group.members
        with producing(group.namesrv.address) as acks:
            acks.wait_for(3000)
            old.process.send_signal(signal.SIGSTOP)
            paused_at = time.monotonic()
            wait(lambda: status(new).role == rmq_pb2.SYNC_MASTER, "id 1 to take over")
            old.process.send_signal(signal.SIGCONT)
            group.wait_in_sync(master=1, slave=0)
            ok_again = acks.count(rmq_pb2.OK) + 500
            acks.wait_for(ok_again, rmq_pb2.OK)
        with closing(RmqClient(group.namesrv.address)) as reader:
            read = read_topic(reader, TOPIC)
        returned = status(old)
        for member in group.members:
            member.stop()
        old_log, new_log = commit_log_bytes(group.store(0)), commit_log_bytes(group.store(1))
    acknowledged = acks.must_be_readable(new)
    figures = report.record(tally(
        "11 controller failover, master paused (SIGSTOP) beyond the failover timeout, then resumed "
        "(3 producers)", acks.sent, (m.body for m in acknowledged), (m.body for m in read),
        notes="every (queue, offset, body) acknowledged OK or stored by the new master read back; the old "
              "master fenced and rejoined as slave",
        without_master_s=f"{acks.first_stored_by(new) - paused_at:.2f}"))
    assert figures.lost == 0 and figures.duplicated == 0
    assert gaps_and_repeats(read) == ([], [])
    assert (returned.role, returned.epoch, returned.replication_error) == (rmq_pb2.SLAVE, 2, "")
    assert old_log == new_log


def test_topic_describe_and_the_metrics_show_roles_epoch_and_the_in_sync_set(tmp_path: Path) -> None:
    with controlled_group(tmp_path) as group:
        group.members[0].kill()
        wait(lambda: status(group.members[1]).role == rmq_pb2.SYNC_MASTER, "id 1 to take over")
        group.members[0].start()
        group.wait_in_sync(master=1, slave=0)
        described = subprocess.run([*processes.RMQ, "topic", "describe", TOPIC, "--endpoints",
                                    group.namesrv.address], capture_output=True, text=True, timeout=60)
        cluster = subprocess.run([*processes.RMQ, "cluster", "--endpoints", group.namesrv.address],
                                 capture_output=True, text=True, timeout=60)
        samples = [scrape(address) for address in group.metrics]
    assert described.returncode == 0, described.stderr
    rows = [line.split() for line in cluster.stdout.splitlines()]
    assert rows[0][:4] == ["BROKER", "ID", "ROLE", "EPOCH"]
    assert [row[:5] for row in rows[1:]] == [[GROUP, "0", "SLAVE", "2", group.members[0].address],
                                             [GROUP, "1", "SYNC_MASTER", "2", group.members[1].address]]
    lines = [line.strip() for line in described.stdout.splitlines() if line.strip().startswith("id ")]
    assert lines[0].startswith(f"id 0 SLAVE {group.members[0].address}, epoch 2,"), lines
    assert lines[1].startswith(f"id 1 SYNC_MASTER {group.members[1].address}, epoch 2,"), lines
    assert "in sync: ids 0, 1 (ok)" in lines[1]
    for broker_id, is_master in ((0, 0), (1, 1)):
        labels = {"broker": GROUP, "broker_id": str(broker_id)}
        assert value(samples[broker_id], "rmq_broker_is_master", **labels) == is_master
        assert value(samples[broker_id], "rmq_master_epoch", **labels) == 2
    assert value(samples[1], "rmq_in_sync_members", broker=GROUP, broker_id="1") == 2


@pytest.mark.parametrize("flags, reason", [
    (["--broker-id", "1"], "id 1 is already a live member at"),
    (["--broker-id", "2", "--config", "{other_cluster}"],
     "belongs to cluster 'other' but this controller manages cluster 'DefaultCluster'"),
])
def test_a_member_the_controller_refuses_exits_with_the_reason(tmp_path: Path, flags: list[str], reason: str
                                                               ) -> None:
    with controlled_group(tmp_path) as group:
        (tmp_path / "other.json").write_text(json.dumps({"cluster_name": "other"}))
        address = f"127.0.0.1:{processes.free_port()}"
        refused = subprocess.run(
            [*processes.RMQ, "broker", "--listen", address, "--store-dir", str(tmp_path / "intruder"),
             "--broker-name", GROUP, "--role", "SYNC_MASTER", "--controller", group.namesrv.address,
             *[flag.format(other_cluster=tmp_path / "other.json") for flag in flags]],
            capture_output=True, text=True, timeout=60)
        assert status(group.members[1]).role == rmq_pb2.SLAVE
    assert refused.returncode != 0
    assert reason in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
