"""The chaos run's cluster: controller(s), SYNC_MASTER broker groups, and the clients, each
process in its own namespace of a `Network`.

Broker groups (RMQ_CHAOS_GROUPS, default 2; the checker's weakened run uses 1): group A (`chaos-a`, members
b0 b1 b2: a master and two slaves) and, with 2, group B (`chaos-b`, members c0 c1: a master and
one slave), each SYNC_MASTER in controller mode under the same controllers. The topic has QUEUES
queues on every group, so the producers send to both and the consumers take from both.

The control plane is the one seam (`ControlPlane`, from RMQ_CHAOS_CONTROLLERS, default 1, and
RMQ_CHAOS_ETCD, etcd members, default 0): without etcd, one name server embeds the controller
on a JSON file (`rmq namesrv --controller --controller-dir`); with etcd members (each in a
namespace of its own; etcd-server installed), every controller is started with `--etcd
HOST:PORT,...` and the brokers with `--controller A,B,...` (docs/controller.md, "Controller on
etcd"). RMQ_CHAOS_MIN_IN_SYNC and RMQ_CHAOS_NOT_CAUGHT_UP_MS set every broker's
min_in_sync_replicas and ha_max_time_not_caught_up_ms (docs/controller.md, "The in-sync set").
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from integration_tests.chaos.checker import MASTER_ROLES
from integration_tests.chaos.netns import Network

REPO = Path(__file__).resolve().parents[2]   # the clients run as -m integration_tests.chaos...
PORT = 9876            # every member has its own address: one well-known port each
ETCD_CLIENT_PORT = 2379
ETCD_PEER_PORT = 2380
GROUP_SIZES = (3, 2)    # members per broker group: A a master and two slaves, B a master and one
TOPIC = "chaos"
QUEUES = 4
CONSUMER_GROUP = "chaos-orderly"
READY_S = 60.0
NAMESRV_SETTINGS = {"controller_failover_timeout_ms": 3000, "controller_scan_interval_ms": 200}
BROKER_SETTINGS = {"controller_heartbeat_interval_ms": 500, "slave_synchronize_interval_ms": 300,
                   "store": {"mapped_file_size_commit_log": 4 << 20, "sync_flush_timeout_ms": 2000}}


@dataclass(frozen=True)
class ControlPlane:
    """How many controllers and etcd members the run starts (the seam; see the module doc)."""

    controllers: int = 1
    etcd_members: int = 0
    groups: int = 1        # broker groups (GROUP_SIZES): 1 = group A only, 2 = A and B
    # the brokers' min_in_sync_replicas and ha_max_time_not_caught_up_ms (RMQ_CHAOS_MIN_IN_SYNC,
    # RMQ_CHAOS_NOT_CAUGHT_UP_MS; the broker's defaults unless set)
    min_in_sync: int = 2
    not_caught_up_ms: int = 15000

    @classmethod
    def from_env(cls) -> ControlPlane:
        plane = cls(int(os.environ.get("RMQ_CHAOS_CONTROLLERS", "1")),
                    int(os.environ.get("RMQ_CHAOS_ETCD", "0")),
                    int(os.environ.get("RMQ_CHAOS_GROUPS", "2")),
                    int(os.environ.get("RMQ_CHAOS_MIN_IN_SYNC", "2")),
                    int(os.environ.get("RMQ_CHAOS_NOT_CAUGHT_UP_MS", "15000")))
        if plane.controllers < 1 or plane.etcd_members < 0:
            raise ValueError(f"RMQ_CHAOS_CONTROLLERS must be 1 or more and RMQ_CHAOS_ETCD 0 or more: {plane}")
        if not 1 <= plane.groups <= len(GROUP_SIZES):
            raise ValueError(f"RMQ_CHAOS_GROUPS must be 1 or {len(GROUP_SIZES)}: {plane.groups}")
        if plane.controllers > 1 and plane.etcd_members == 0:
            raise ValueError("several controllers (RMQ_CHAOS_CONTROLLERS) share their state through etcd: "
                             "set RMQ_CHAOS_ETCD too")
        if plane.etcd_members and shutil.which("etcd") is None:
            raise ValueError("RMQ_CHAOS_ETCD needs etcd-server (`etcd` on PATH)")
        return plane

    def controller_args(self, index: int, directory: Path, etcd: list[str]) -> list[str]:
        if self.etcd_members:
            return ["--controller", "--etcd", ",".join(etcd)]
        return ["--controller", "--controller-dir", str(directory / f"controller-{index}")]


@dataclass
class Member:
    """One process in its own namespace; `args` run under the namespace's `ip netns exec`."""

    name: str
    address: str
    args: list[str]
    log: Path
    network: Network
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> Member:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(self.network.exec_prefix(self.name) + self.args, stdout=log,
                                            stderr=subprocess.STDOUT, cwd=REPO)
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, number: signal.Signals) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(number)

    def kill(self) -> None:
        if self.alive():
            assert self.process is not None
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait()

    def stop(self, timeout: float = 20.0) -> None:
        if not self.alive():
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.process.terminate()
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


@dataclass
class BrokerGroup:
    """One broker group: `members[0]` (broker id 0) is started first and made master."""

    name: str
    members: list[Member] = field(default_factory=list)


RMQ = [sys.executable, "-m", "rmq.cli"]
CLIENT = [sys.executable, "-m", "integration_tests.chaos.client_process"]


@dataclass
class Cluster:
    network: Network
    directory: Path
    plane: ControlPlane
    role: str = "SYNC_MASTER"    # the group's mode; the checker's own test weakens it to ASYNC_MASTER
    etcd: list[Member] = field(default_factory=list)
    controllers: list[Member] = field(default_factory=list)
    groups: list[BrokerGroup] = field(default_factory=list)
    clients: list[Member] = field(default_factory=list)
    monitor: Member | None = None

    @property
    def history(self) -> Path:
        return self.directory / "history"

    def _member(self, name: str, args: list[str]) -> Member:
        address = f"{self.network.add_member(name)}:{PORT}"
        return Member(name, address, args, self.directory / f"{name}.log", self.network)

    def build(self) -> None:
        """Every namespace and every process's command line (nothing started yet)."""
        self.history.mkdir(parents=True, exist_ok=True)
        (self.directory / "namesrv.json").write_text(json.dumps(NAMESRV_SETTINGS))
        (self.directory / "broker.json").write_text(json.dumps({
            **BROKER_SETTINGS, "min_in_sync_replicas": self.plane.min_in_sync,
            "ha_max_time_not_caught_up_ms": self.plane.not_caught_up_ms}))
        self._build_etcd()
        etcd = [m.address for m in self.etcd]
        for index in range(self.plane.controllers):
            name = f"ctl{index}"
            address = f"{self.network.add_member(name)}:{PORT}"
            args = [*RMQ, "namesrv", "--listen", address, "--insecure-listen",
                    *self.plane.controller_args(index, self.directory, etcd),
                    "--config", str(self.directory / "namesrv.json")]
            self.controllers.append(Member(name, address, args, self.directory / f"{name}.log", self.network))
        namesrvs = ",".join(c.address for c in self.controllers)
        for letter, size in zip("abc", GROUP_SIZES[:self.plane.groups], strict=False):
            group = BrokerGroup(f"chaos-{letter}")
            for broker_id in range(size):
                name = f"{chr(ord(letter) + 1)}{broker_id}"      # group a: b0 b1 b2, group b: c0 c1
                address = f"{self.network.add_member(name)}:{PORT}"
                args = [*RMQ, "broker", "--listen", address, "--insecure-listen", "--store-dir",
                        str(self.directory / name), "--broker-name", group.name,
                        "--broker-id", str(broker_id), "--role", self.role, "--flush", "async",
                        "--namesrv", namesrvs, "--controller", namesrvs,
                        "--config", str(self.directory / "broker.json")]
                log = self.directory / f"{name}.log"
                group.members.append(Member(name, address, args, log, self.network))
            self.groups.append(group)
        for index in range(2):
            self._client(f"prod{index}",
                         ["producer", namesrvs, TOPIC, str(self.history / f"prod{index}.sends")])
            self._client(f"cons{index}", ["consumer", namesrvs, CONSUMER_GROUP, TOPIC,
                                          str(self.history / f"cons{index}.takes")])
        self.network.add_member("mon")
        self.monitor = Member("mon", "", [*CLIENT, "monitor", str(self.history / "members.roles"),
                                          *(f"{g.name}/{m.name}={m.address}"
                                            for g in self.groups for m in g.members)],
                              self.directory / "mon.log", self.network)

    def _client(self, name: str, args: list[str]) -> None:
        self.network.add_member(name)
        self.clients.append(Member(name, "", [*CLIENT, *args, name], self.directory / f"{name}.log",
                                   self.network))

    def _build_etcd(self) -> None:
        names = [f"etcd{index}" for index in range(self.plane.etcd_members)]
        hosts = [self.network.add_member(name) for name in names]
        initial = ",".join(f"{n}=http://{h}:{ETCD_PEER_PORT}" for n, h in zip(names, hosts, strict=True))
        for name, host in zip(names, hosts, strict=True):
            args = ["etcd", "--name", name, "--data-dir", str(self.directory / name),
                    "--listen-client-urls", f"http://{host}:{ETCD_CLIENT_PORT}",
                    "--advertise-client-urls", f"http://{host}:{ETCD_CLIENT_PORT}",
                    "--listen-peer-urls", f"http://{host}:{ETCD_PEER_PORT}",
                    "--initial-advertise-peer-urls", f"http://{host}:{ETCD_PEER_PORT}",
                    "--initial-cluster", initial, "--initial-cluster-state", "new"]
            self.etcd.append(Member(name, f"{host}:{ETCD_CLIENT_PORT}", args, self.directory / f"{name}.log",
                                    self.network))

    @property
    def brokers(self) -> list[Member]:
        return [member for group in self.groups for member in group.members]

    def group_of(self, member: Member) -> BrokerGroup:
        return next(group for group in self.groups if member in group.members)

    @property
    def servers(self) -> list[Member]:
        """The members faults pick from (clients and the monitor stay out of them)."""
        return [*self.etcd, *self.controllers, *self.brokers]

    def start(self) -> None:
        """etcd, controllers, the monitor, each group's master (id 0) first, then the slaves; waits
        until every id 0 is master with its slaves, creates the topic, starts the consumers, and
        the producers once the consumers share the queues."""
        assert self.monitor is not None
        for member in [*self.etcd, *self.controllers]:
            member.start()
        self.monitor.start()
        firsts = [group.members[0] for group in self.groups]
        for member in firsts:
            member.start()
        self.wait(lambda: all(self.roles().get(m.name) == self.role for m in firsts),
                  "each group's id 0 to be master")
        slaves = [m for m in self.brokers if m not in firsts]
        for member in slaves:
            member.start()
        self.wait(lambda: all(self.roles().get(m.name) == "SLAVE" for m in slaves), "every slave")
        self.create_topic()
        consumers = [c for c in self.clients if c.name.startswith("cons")]
        for client in consumers:
            client.start()
        self.wait(self._queues_shared, "the consumers to share the queues")
        for client in self.clients:
            if client not in consumers:
                client.start()

    def _queues_shared(self) -> bool:
        """Every consumer owns queues, each queue of every group one owner (no rebalance under
        the first sends)."""
        owned = [json.loads(p.read_text() or "[]") for p in self.history.glob("*.owned")]
        queues = sorted(tuple(q) for mine in owned for q in mine)
        every = sorted((group.name, queue) for group in self.groups for queue in range(QUEUES))
        return len(owned) == 2 and all(owned) and queues == every

    def create_topic(self) -> None:
        subprocess.run([*self.network.exec_prefix("mon"), *RMQ, "topic", "create", TOPIC, "--queues",
                        str(QUEUES), "--endpoints", self.controllers[0].address],
                       check=True, capture_output=True)

    def roles(self) -> dict[str, str | None]:
        """Each broker's role in the monitor's latest sample."""
        latest: dict[str, str | None] = {}
        path = self.history / "members.roles"
        if path.exists():
            for text in path.read_text().splitlines():
                if text.endswith("}"):
                    line = json.loads(text)
                    latest[line["member"]] = line["role"]
        return latest

    def master(self, group: BrokerGroup) -> Member:
        """The member the controller made master of `group`: the newest epoch any of its members
        answers as master (epochs are per group)."""
        names = {m.name for m in group.members}
        newest: tuple[int, str] | None = None
        path = self.history / "members.roles"
        for text in path.read_text().splitlines()[-400:]:
            if text.endswith("}"):
                line = json.loads(text)
                if line["member"] in names and line["role"] in MASTER_ROLES and (
                        newest is None or line["epoch"] >= newest[0]):
                    newest = (line["epoch"], line["member"])
        if newest is None:
            raise RuntimeError(f"no broker of {group.name} answers as master")
        return next(m for m in group.members if m.name == newest[1])

    def wait(self, condition: Callable[[], bool], what: str, timeout: float = READY_S,
             interval: float = 0.1) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            for member in self.servers:
                if member.process is not None and member.process.poll() not in (None, -9):
                    tail = "\n".join(member.log.read_text(errors="replace").splitlines()[-5:])
                    raise RuntimeError(f"{member.name} exited ({member.process.returncode}); "
                                       f"its log ends:\n{tail}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(interval)

    def stop_producers(self) -> None:
        for client in self.clients:
            if client.name.startswith("prod"):
                client.stop()

    def stop(self) -> None:
        for member in [*self.clients, *([self.monitor] if self.monitor else []), *reversed(self.brokers),
                       *self.controllers, *self.etcd]:
            member.stop()
