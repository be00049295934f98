"""One chaos run: the private network, the cluster, the fault schedule, the drain, the check.

Settings (environment, as OpenChaos's driver options):
RMQ_CHAOS_FAULTS     comma-separated fault names (faults.Fault), or "all"
RMQ_CHAOS_SECONDS    how long the schedule runs
RMQ_CHAOS_INTERVAL   seconds each fault holds, and again after its heal before the next
RMQ_CHAOS_SEED       the random picks (victims, halves), for a run to be repeated
RMQ_CHAOS_GROUPS     broker groups: 1 (group A: master + two slaves) or 2 (and group B: master +
                     one slave); 2 unless set
RMQ_CHAOS_CONTROLLERS, RMQ_CHAOS_ETCD: the control plane (cluster.ControlPlane)
RMQ_CHAOS_MIN_IN_SYNC, RMQ_CHAOS_NOT_CAUGHT_UP_MS: the brokers' min_in_sync_replicas (2) and
                     ha_max_time_not_caught_up_ms (15000) (cluster.ControlPlane)
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from integration_tests.chaos import faults
from integration_tests.chaos.checker import MASTER_ROLES, FaultFigures, FaultWindow, History, check
from integration_tests.chaos.client_process import KEYS
from integration_tests.chaos.cluster import Cluster, ControlPlane
from integration_tests.chaos.netns import Network

WARM_UP_S = 5.0        # producing before the first fault (the baseline window)
DRAIN_S = 90.0         # after producing stops: until the consumers took every acknowledged body
SETTLE_S = 90.0        # after a heal: until every broker answers and one is master
PRODUCE_UNTIL_S = 90.0  # after the schedule, with `produce_until`: until the history shows it


@dataclass(frozen=True)
class Schedule:
    faults: list[faults.Fault]
    seconds: float
    interval: float
    seed: int

    @classmethod
    def from_env(cls, faults_default: str, seconds_default: float, interval_default: float) -> Schedule:
        return cls(faults.Fault.parse(os.environ.get("RMQ_CHAOS_FAULTS", faults_default)),
                   float(os.environ.get("RMQ_CHAOS_SECONDS", seconds_default)),
                   float(os.environ.get("RMQ_CHAOS_INTERVAL", interval_default)),
                   int(os.environ.get("RMQ_CHAOS_SEED", random.randrange(1 << 30))))


@dataclass
class Outcome:
    figures: dict[str, FaultFigures]
    skipped: dict[str, str] = field(default_factory=dict)    # fault -> why it did not run
    history: History | None = None
    directory: Path | None = None


def run(directory: Path, schedule: Schedule, role: str = "SYNC_MASTER",
        plane: ControlPlane | None = None, drain_idle_s: float | None = None,
        produce_until: Callable[[History], bool] | None = None) -> Outcome:
    """The cluster under `schedule`; tears every namespace and process down whatever happens.
    `drain_idle_s`: end the drain once the consumers took nothing new for so long (a run that
    is to lose messages need not wait DRAIN_S for them). `produce_until`: after the schedule the
    producers go on until it holds of the history so far (what a test asserts of the run may
    need the producers to have written that far), failing after PRODUCE_UNTIL_S."""
    pick = random.Random(schedule.seed)
    network = Network(run=f"{os.getpid() % 0x10000:04x}", subnet=f"10.213.{pick.randrange(1, 255)}")
    with network:
        cluster = Cluster(network, directory, plane or ControlPlane.from_env(), role)
        try:
            cluster.build()
            network.heal()      # permanent neighbour entries: a heal never waits for ARP
            cluster.start()
            windows, skipped = _faults(cluster, schedule, pick)
            if produce_until is not None:     # read once a second: a read parses every line so far
                cluster.wait(lambda: produce_until(History.read(cluster.history, [], 0.0)),
                             f"{produce_until.__name__} after the schedule", PRODUCE_UNTIL_S, interval=1.0)
            cluster.stop_producers()
            end = time.monotonic()
            _drain(cluster, drain_idle_s)
        finally:
            cluster.stop()
    history = History.read(cluster.history, windows, end)
    (directory / "schedule.json").write_text(json.dumps({
        "seed": schedule.seed, "skipped": skipped, "faults": [w.__dict__ for w in windows],
        # the history's times are CLOCK_MONOTONIC, the members' logs wall clock: one pair to read both
        "clock": {"monotonic": time.monotonic(), "wall": time.time()}}))
    return Outcome(check(history, KEYS), skipped, history, directory)


def _faults(cluster: Cluster, schedule: Schedule, pick: random.Random
            ) -> tuple[list[FaultWindow], dict[str, str]]:
    skipped = {f.value: why for f in schedule.faults if (why := faults.unavailable(f, cluster))}
    runnable = [f for f in schedule.faults if f.value not in skipped]
    cluster.wait(lambda: _acknowledged(cluster) > 0, "the first acknowledged send")
    time.sleep(WARM_UP_S)
    windows: list[FaultWindow] = []
    deadline = time.monotonic() + schedule.seconds
    for number in range(len(runnable) * 1000):
        if not runnable or time.monotonic() >= deadline:
            break
        fault = runnable[number % len(runnable)]
        start = time.monotonic()
        heal = faults.inject(fault, cluster, pick)
        time.sleep(schedule.interval)
        heal()
        windows.append(FaultWindow(fault.value, start, time.monotonic()))
        print(f"[chaos] {fault.value}: injected, healed after {time.monotonic() - start:.1f} s", flush=True)
        cluster.wait(lambda: _healthy(cluster), f"the group to recover after {fault.value}", SETTLE_S)
        time.sleep(schedule.interval)
    return windows, skipped


def _acknowledged(cluster: Cluster) -> int:
    return sum(path.read_text().count('"SEND_OK"') for path in cluster.history.glob("*.sends"))


def _healthy(cluster: Cluster) -> bool:
    """Every broker answers, and in each broker group one answers as master."""
    roles = cluster.roles()
    return all(roles.get(b.name) for b in cluster.brokers) and all(
        any(roles.get(m.name) in MASTER_ROLES for m in group.members) for group in cluster.groups)


def _drain(cluster: Cluster, idle_s: float | None) -> None:
    """Until every body acknowledged SEND_OK was taken by a consumer, or DRAIN_S passed, or (with
    `idle_s`) the consumers took nothing new for idle_s (what is missing then is lost)."""
    deadline = time.monotonic() + DRAIN_S
    taken, moved = 0, time.monotonic()
    while time.monotonic() < deadline:
        history = History.read(cluster.history, [], 0.0)
        acked = {s.body for s in history.sends if s.status == "SEND_OK"}
        if acked <= {t.body for t in history.takes}:
            return
        if len(history.takes) != taken:
            taken, moved = len(history.takes), time.monotonic()
        elif idle_s is not None and time.monotonic() - moved > idle_s:
            return
        time.sleep(1.0)
