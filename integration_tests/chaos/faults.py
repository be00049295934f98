"""OpenChaos's faults on the chaos cluster. `inject(kind, cluster, pick)` makes one and answers
what heals it; the run heals each fault before it injects the next.

Partitions cut members apart on the private bridge (netns.Network.cut); clients are cut only
from the members a fault isolates completely (random-partition). Suspends are SIGSTOP then
SIGCONT; kills are kill -9 then a start on the same store (or controller directory).

With two broker groups, a fault on "the master" (its slaves, "the broker group") picks one group
at random (`pick`), then that group's master and slaves; random-* faults pick among every server.
"""

from __future__ import annotations

import enum
import random
import signal
from collections.abc import Callable

from integration_tests.chaos.cluster import Cluster, Member

Heal = Callable[[], None]
LOSS_PERCENT = 30


class Fault(enum.Enum):
    RANDOM_PARTITION = "random-partition"                   # one random server from everyone
    MASTER_CONTROLLER_PARTITION = "fixed-partition"         # the master from the controllers (and etcd)
    MASTER_SLAVES_PARTITION = "master-slaves-partition"     # the master from its slaves
    MASTER_PARTITION = "master-partition"                   # the master from controllers and slaves
    BRIDGE = "bridge"                                       # two halves, one server hearing both
    MAJORITIES_RING = "partition-majorities-ring"           # each server hears a majority, none the same
    RANDOM_SUSPEND = "random-suspend"
    LEADER_SUSPEND = "leader-suspend"
    RANDOM_KILL = "random-kill"
    LEADER_KILL = "leader-kill"
    MINOR_KILL = "minor-kill"                               # a minority of the broker group
    MAJOR_KILL = "major-kill"                               # a majority of the broker group
    RANDOM_LOSS = "random-loss"                             # tc netem loss on one random server

    @classmethod
    def parse(cls, text: str) -> list[Fault]:
        """RMQ_CHAOS_FAULTS: comma-separated names; "all" for every fault."""
        if text.strip() == "all":
            return list(cls)
        names = {fault.value: fault for fault in cls}
        found = []
        for word in filter(None, (w.strip() for w in text.split(","))):
            if word not in names:
                raise ValueError(f"unknown chaos fault {word!r} in RMQ_CHAOS_FAULTS: "
                                 f"one of {', '.join(names)}")
            found.append(names[word])
        if not found:
            raise ValueError("RMQ_CHAOS_FAULTS names no fault")
        return found


def unavailable(fault: Fault, cluster: Cluster) -> str | None:
    """Why `fault` cannot run on this cluster or machine, or None."""
    if fault is Fault.MAJORITIES_RING and len(cluster.servers) < 4:
        return f"{fault.value} needs 4 servers or more (this cluster has {len(cluster.servers)})"
    if fault is Fault.RANDOM_LOSS:
        return cluster.network.loss_unavailable()
    return None


def inject(fault: Fault, cluster: Cluster, pick: random.Random) -> Heal:
    network = cluster.network
    servers = [m.name for m in cluster.servers]
    if fault in _PROCESS_FAULTS:
        return _PROCESS_FAULTS[fault](cluster, pick)
    if fault is Fault.RANDOM_LOSS:
        victim = pick.choice(servers)
        network.set_loss(victim, LOSS_PERCENT)
        return lambda: network.set_loss(victim, None)
    for side_a, side_b in _cuts(fault, cluster, pick):
        _say(fault, f"{side_a} cut from {side_b}")
        network.cut(side_a, side_b)
    return network.heal


def _say(fault: Fault, what: str) -> None:
    print(f"[chaos] {fault.value}: {what}", flush=True)


def _cuts(fault: Fault, cluster: Cluster, pick: random.Random) -> list[tuple[list[str], list[str]]]:
    servers = [m.name for m in cluster.servers]
    control = [m.name for m in [*cluster.etcd, *cluster.controllers]]
    group = pick.choice(cluster.groups)
    master = cluster.master(group).name
    slaves = [m.name for m in group.members if m.name != master]
    if fault is Fault.RANDOM_PARTITION:
        victim = pick.choice(servers)
        return [([victim], [n for n in [*servers, *(c.name for c in cluster.clients)] if n != victim])]
    if fault is Fault.MASTER_CONTROLLER_PARTITION:
        return [([master], control)]
    if fault is Fault.MASTER_SLAVES_PARTITION:
        return [([master], slaves)]
    if fault is Fault.MASTER_PARTITION:
        return [([master], [*control, *slaves])]
    shuffled = pick.sample(servers, len(servers))
    if fault is Fault.BRIDGE:
        half = len(shuffled) // 2
        return [(shuffled[:half], shuffled[half + 1:])]    # shuffled[half] hears both halves
    assert fault is Fault.MAJORITIES_RING
    n = len(shuffled)
    hears = -(-(n // 2) // 2)                               # neighbours heard on each side: a majority
    return [([shuffled[i]], [shuffled[(i + d) % n] for d in range(1, n) if min(d, n - d) > hears])
            for i in range(n)]


def _suspend(members: list[Member]) -> Heal:
    print(f"[chaos] SIGSTOP {[m.name for m in members]}", flush=True)
    for member in members:
        member.signal(signal.SIGSTOP)

    def heal() -> None:
        for member in members:
            member.signal(signal.SIGCONT)
    return heal


def _kill(members: list[Member]) -> Heal:
    print(f"[chaos] kill -9 {[m.name for m in members]}", flush=True)
    for member in members:
        member.kill()

    def heal() -> None:
        for member in members:
            member.start()
    return heal


def _master(cluster: Cluster, pick: random.Random) -> Member:
    return cluster.master(pick.choice(cluster.groups))


def _brokers(cluster: Cluster, pick: random.Random, majority: bool) -> list[Member]:
    """A minority (or majority) of one broker group's members."""
    members = pick.choice(cluster.groups).members
    return pick.sample(members, len(members) // 2 + (1 if majority else 0))


_PROCESS_FAULTS: dict[Fault, Callable[[Cluster, random.Random], Heal]] = {
    Fault.RANDOM_SUSPEND: lambda c, p: _suspend([p.choice(c.servers)]),
    Fault.LEADER_SUSPEND: lambda c, p: _suspend([_master(c, p)]),
    Fault.RANDOM_KILL: lambda c, p: _kill([p.choice(c.servers)]),
    Fault.LEADER_KILL: lambda c, p: _kill([_master(c, p)]),
    Fault.MINOR_KILL: lambda c, p: _kill(_brokers(c, p, majority=False)),
    Fault.MAJOR_KILL: lambda c, p: _kill(_brokers(c, p, majority=True)),
}
