"""Scenario 11 (controller mode): automatic failover under the controller (docs/controller.md,
docs/controller.md) with real processes: `rmq namesrv --controller` and a SYNC_MASTER broker
group of two members started with --controller, producers sending through the name server.

The master is killed with SIGKILL under the producers: the controller elects the slave, the
producers follow the new route without a restart, and every message acknowledged with OK,
before the kill or after it, is read back at the queue offset its acknowledgement named. The
time without a master (from the kill to the first acknowledgement by the new master) is
reported. The old master, started again on its own store, learns the new epoch, drops what it
wrote that the new master never held and rejoins as slave: it ends with exactly the new
master's CommitLog. The same with the old master's store deleted before it returns, with the
slave paused (SIGSTOP) before the kill, and with the master paused beyond the failover timeout
and resumed (fenced at its next heartbeat: a send in flight then is never answered OK).
"""

from __future__ import annotations

import enum
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
        wait_in_sync(self.members, master, slave)


def wait_in_sync(members: list[processes.ServerProcess], master: int, slave: int) -> None:
    """`slave` replicates from `master`, is in its in-sync set and has copied every byte."""
    wait(lambda: status(members[slave]).role == rmq_pb2.SLAVE
         and slave in status(members[master]).in_sync_ids, f"id {slave} in sync with id {master}")
    wait(lambda: status(members[slave]).commit_log_max_offset
         == status(members[master]).commit_log_max_offset, f"id {slave} to catch up")


@contextmanager
def controlled_group(tmp_path: Path, **settings: int) -> Iterator[ControlledGroup]:
    (tmp_path / "namesrv.json").write_text(json.dumps(NAMESRV_SETTINGS))
    (tmp_path / "broker.json").write_text(json.dumps({**BROKER_SETTINGS, **settings}))
    secret = tmp_path / "cluster-secret"   # every heartbeat to the controller is proven with it
    secret.touch(mode=0o600)
    secret.write_text("the cluster's secret: 32 characters")
    namesrv = processes.namesrv(tmp_path, ["--controller", "--controller-dir", str(tmp_path / "controller"),
                                           "--cluster-secret", str(secret),
                                           "--config", str(tmp_path / "namesrv.json")]).start()
    metrics = [f"127.0.0.1:{processes.free_port()}" for _ in range(2)]
    flags = ["--controller", namesrv.address, "--config", str(tmp_path / "broker.json"),
             "--cluster-secret", str(secret)]
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

    def must_be_readable(self, new_master: processes.ServerProcess) -> list[Ack]:
        """Every message acknowledged OK, and every message the new master stored."""
        port = _port(new_master.address)
        return [ack for ack in self.acks if ack.status == rmq_pb2.OK or ack.stored_by == port]

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


class Disruption(enum.Enum):
    """What happens to the master (id 0) while the producers run."""

    KILL = "SYNC_MASTER kill -9"
    KILL_AND_DELETE_STORE = "SYNC_MASTER kill -9 + store deleted"
    PAUSE_SLAVE_THEN_KILL = "slave paused (SIGSTOP) then master kill -9"
    PAUSE_MASTER = "master paused (SIGSTOP) beyond the failover timeout, then resumed"


@dataclass
class Failover:
    """What one failover left: the acknowledgements, the seconds without a master, the topic
    read back through the name server, both members' status once the old master rejoined, how
    much CommitLog the old master brought back (-1: it was paused, not killed) and both
    members' CommitLogs at the end."""

    acks: Acknowledgements
    without_master_s: float
    read: list[StoredMessage]
    new_master: rmq_pb2.BrokerStatusResponse
    returned: rmq_pb2.BrokerStatusResponse
    held_before_return: int
    old_log: bytes
    new_log: bytes


def _disrupt(group: ControlledGroup, disruption: Disruption, acks: Acknowledgements) -> float:
    """Disrupts the master under the producers; the moment the group lost it."""
    old, new = group.members
    if disruption is Disruption.PAUSE_MASTER:
        old.process.send_signal(signal.SIGSTOP)
        paused_at = time.monotonic()
        wait(lambda: status(new).role == rmq_pb2.SYNC_MASTER, "id 1 to take over")
        old.process.send_signal(signal.SIGCONT)
        group.wait_in_sync(master=1, slave=0)
        acks.wait_for(acks.count(rmq_pb2.OK) + 500, rmq_pb2.OK)   # OK again once it confirms
        return paused_at
    if disruption is Disruption.PAUSE_SLAVE_THEN_KILL:
        new.process.send_signal(signal.SIGSTOP)
        acks.wait_for(3 * 32, rmq_pb2.FLUSH_SLAVE_TIMEOUT)
    old.kill()
    if disruption is Disruption.PAUSE_SLAVE_THEN_KILL:
        new.process.send_signal(signal.SIGCONT)
    killed_at = time.monotonic()
    if disruption is Disruption.KILL_AND_DELETE_STORE:
        shutil.rmtree(group.store(0))
    acks.wait_for(acks.count() + 1000)
    return killed_at


def fail_over(group: ControlledGroup, disruption: Disruption) -> Failover:
    """Producers run until 3,000 messages are acknowledged; the master (id 0) is disrupted and
    producing goes on (until 1,000 more are acknowledged after a kill; until the resumed
    master rejoined and 500 more are acknowledged OK after a pause). The topic is read back
    (a killed master still down: the new master alone serves it); a killed master is started
    again on its store (or an empty one) and rejoins as slave."""
    old, new = group.members
    with producing(group.namesrv.address) as acks:
        acks.wait_for(3000)
        lost_master_at = _disrupt(group, disruption, acks)
    with closing(RmqClient(group.namesrv.address)) as reader:
        read = read_topic(reader, TOPIC)
    held_before_return = -1
    if disruption is not Disruption.PAUSE_MASTER:
        held_before_return = len(commit_log_bytes(group.store(0))) if group.store(0).exists() else 0
        old.start()
        group.wait_in_sync(master=1, slave=0)
    new_master, returned = status(new), status(old)
    for member in group.members:
        member.stop()
    return Failover(acks, acks.first_stored_by(new) - lost_master_at, read, new_master, returned,
                    held_before_return, commit_log_bytes(group.store(0)), commit_log_bytes(group.store(1)))


def commit_log_bytes(store: Path) -> bytes:
    return b"".join(path.read_bytes() for path in sorted((store / "commitlog").iterdir())).rstrip(b"\0")


def assert_every_acknowledged_message_read(report: ReliabilityReport, scenario: str, notes: str, sent: int,
                                           acknowledged: list[Ack], read: list[StoredMessage],
                                           **figures: object) -> None:
    """Records the scenario's figures; every acknowledged (queue, offset, body) was read back,
    none twice, no queue offset missing."""
    recorded = report.record(tally(scenario, sent, (ack.message.body for ack in acknowledged),
                                   (m.body for m in read), notes=notes, **figures))
    read_set = set(read)
    missing = [ack for ack in acknowledged if ack.message not in read_set]
    assert missing == [], f"{len(missing)} acknowledged messages not readable: {missing[:3]}"
    assert recorded.lost == 0 and recorded.duplicated == 0
    assert gaps_and_repeats(read) == ([], [])


@pytest.mark.parametrize("disruption", list(Disruption), ids=lambda disruption: disruption.name.lower())
def test_the_slave_takes_over_and_no_acknowledged_message_is_lost_and_the_old_master_rejoins(
        tmp_path: Path, report: ReliabilityReport, disruption: Disruption) -> None:
    """After a kill -9 (its store kept or deleted; or after the slave, paused with SIGSTOP,
    missed batches the master then answered FLUSH_SLAVE_TIMEOUT, stored on it only) or a
    SIGSTOP beyond the failover timeout, the slave is elected; the old master, started again
    (or resumed: it learns the new epoch at its next heartbeat, is fenced and refuses writes),
    drops what the new master never held and rejoins as slave. Every message acknowledged OK or
    stored by the new master is read back, and the old master ends with the new master's
    CommitLog."""
    with controlled_group(tmp_path) as group:
        failover = fail_over(group, disruption)
        epoch_2_start = json.loads((tmp_path / "controller" / "controller.json").read_text()
                                   )["groups"][GROUP]["epoch_starts"]["2"]
    acks = failover.acks
    assert_every_acknowledged_message_read(
        report, f"11 controller failover, {disruption.value} (3 producers, failover timeout "
                f"{FAILOVER_TIMEOUT_MS} ms)",
        "every (queue, offset, body) acknowledged OK or stored by the new master (alone: "
        "SLAVE_NOT_AVAILABLE) read back; the old master rejoined as slave with the new master's CommitLog",
        acks.sent, acks.must_be_readable(group.members[1]), failover.read,
        without_master_s=f"{failover.without_master_s:.2f}", ok=acks.count(rmq_pb2.OK),
        master_only=acks.count(rmq_pb2.FLUSH_SLAVE_TIMEOUT))
    assert (failover.new_master.role, failover.new_master.epoch) == (rmq_pb2.SYNC_MASTER, 2)
    returned = failover.returned
    assert (returned.role, returned.epoch, returned.replication_error) == (rmq_pb2.SLAVE, 2, "")
    assert failover.old_log == failover.new_log
    if disruption is Disruption.PAUSE_SLAVE_THEN_KILL:   # what the old master alone stored was dropped
        assert failover.held_before_return > epoch_2_start


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
    assert_every_acknowledged_message_read(
        report, "11 controller mode, both members kill -9 and restarted at once (3 producers)",
        f"id {master} master afterwards; every OK-acknowledged (queue, offset, body) read back, both "
        f"CommitLogs equal", acks.sent, [ack for ack in acks.acks if ack.status == rmq_pb2.OK], read)
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
    members_table, _, controller = cluster.stdout.partition("\n\n")
    rows = [line.split() for line in members_table.splitlines()]
    assert rows[0][:4] == ["BROKER", "ID", "ROLE", "EPOCH"]
    assert [row[:5] for row in rows[1:]] == [[GROUP, "0", "SLAVE", "2", group.members[0].address],
                                             [GROUP, "1", "SYNC_MASTER", "2", group.members[1].address]]
    assert controller.splitlines()[0] == f"leading controller: {group.namesrv.address}"
    assert [GROUP, "2", "1", "0,1"] in [line.split() for line in controller.splitlines()]   # the SyncStateSet
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
    (["--broker-id", "1", "--cluster-secret", "{secret}"], "id 1 is already a live member at"),
    (["--broker-id", "2", "--config", "{other_cluster}", "--cluster-secret", "{secret}"],
     "belongs to cluster 'other' but this controller manages cluster 'DefaultCluster'"),
    (["--broker-id", "2"], "the broker sent no cluster proof"),   # a registration account is not enough
])
def test_a_member_the_controller_refuses_exits_with_the_reason(tmp_path: Path, flags: list[str], reason: str
                                                               ) -> None:
    with controlled_group(tmp_path) as group:
        (tmp_path / "other.json").write_text(json.dumps({"cluster_name": "other"}))
        address = f"127.0.0.1:{processes.free_port()}"
        refused = subprocess.run(
            [*processes.RMQ, "broker", "--listen", address, "--store-dir", str(tmp_path / "intruder"),
             "--broker-name", GROUP, "--role", "SYNC_MASTER", "--controller", group.namesrv.address,
             *[flag.format(other_cluster=tmp_path / "other.json", secret=tmp_path / "cluster-secret")
               for flag in flags]],
            capture_output=True, text=True, timeout=60)
        assert status(group.members[1]).role == rmq_pb2.SLAVE
    assert refused.returncode != 0
    assert reason in refused.stderr and "Traceback" not in refused.stderr, refused.stderr


NOT_CAUGHT_UP_MS = 2000   # ha_max_time_not_caught_up_ms: how long the paused slave stays in sync
REFUSED = {rmq_pb2.SLAVE_NOT_AVAILABLE, rmq_pb2.FLUSH_SLAVE_TIMEOUT}


def send_once(client: RmqClient) -> int:
    """One message sent: its status code (OK, or stored on the master only, or the refusal)."""
    try:
        return int(client.send(TOPIC, [OutgoingMessage(b"x")]).status)
    except RmqError as error:
        return error.code


@pytest.mark.parametrize("min_in_sync", [1, 2])
def test_a_group_whose_only_slave_is_paused_acknowledges_alone_only_with_min_in_sync_1(
        tmp_path: Path, min_in_sync: int) -> None:
    """Issue 47, min_in_sync_replicas: the only slave paused (SIGSTOP), the master reports it out of
    sync after ha_max_time_not_caught_up_ms; with 1, sends are OK again within that time, a
    heartbeat and a send's slave wait, and only once the controller's in-sync set is the master
    alone; with the default 2 every send is refused meanwhile. The resumed slave catches up
    (every byte the master acknowledged alone) and rejoins the set."""
    settings = {"min_in_sync_replicas": min_in_sync, "ha_max_time_not_caught_up_ms": NOT_CAUGHT_UP_MS}
    with controlled_group(tmp_path, **settings) as group, closing(RmqClient(group.namesrv.address)) as client:
        master, slave = group.members
        assert send_once(client) == rmq_pb2.OK
        slave.process.send_signal(signal.SIGSTOP)
        paused = time.monotonic()
        # the not-caught-up time, a heartbeat (0.5 s), a send's slave wait (1 s), 2 s of a busy machine
        window = NOT_CAUGHT_UP_MS / 1000 + 0.5 + 1.0 + 2.0
        answers: list[int] = []
        while time.monotonic() - paused < window and rmq_pb2.OK not in answers:
            answers.append(send_once(client))
        resumed_after = time.monotonic() - paused
        print(f"min_in_sync_replicas {min_in_sync}: {len(answers)} sends, {resumed_after:.2f} s")
        in_sync_then = list(status(master).in_sync_ids)
        slave.process.send_signal(signal.SIGCONT)
        group.wait_in_sync(master=0, slave=1)
        assert send_once(client) == rmq_pb2.OK
    assert set(answers[:-1]) <= REFUSED, answers
    if min_in_sync == 1:
        assert answers[-1] == rmq_pb2.OK and in_sync_then == [0], (answers, in_sync_then)
        assert resumed_after >= NOT_CAUGHT_UP_MS / 1000, resumed_after   # never before the slave left the set
    else:
        assert rmq_pb2.OK not in answers and set(answers) <= REFUSED, answers
