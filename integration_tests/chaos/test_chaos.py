"""Chaos runs (issue 47): the cluster in network namespaces under OpenChaos's faults, checked
by integration_tests/chaos/checker.py. They need root and `ip netns`; they skip with the reason
otherwise.

`make test` runs the short schedule (SHORT_FAULTS, about three minutes) and the checker's own
test; `make chaos` runs the long one (every fault, RMQ_CHAOS_SECONDS=600) and writes
RELIABILITY.md's chaos section. Both schedules run two broker groups (RMQ_CHAOS_GROUPS=1: group
A alone); the weakened run is group A alone.
Settings: integration_tests/chaos/run.py.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import pytest

from integration_tests.chaos import netns, report
from integration_tests.chaos.checker import BEFORE_FAULTS, explain_lost, lost_sends, written_over_untaken
from integration_tests.chaos.cluster import ControlPlane
from integration_tests.chaos.faults import Fault
from integration_tests.chaos.run import Schedule, run

UNAVAILABLE = netns.unavailable()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(UNAVAILABLE is not None, reason=str(UNAVAILABLE))]

# master-partition and leader-suspend ran in `make chaos` only until a deposed master stopped serving
# pulls of what it stored alone (reads now end at the confirm offset, docs/controller.md): an orderly
# consumer took those at offsets where the new master held acknowledged messages (1-2 lost)
SHORT_FAULTS = "leader-kill,master-partition,leader-suspend,random-loss"
SHORT_SECONDS = 40.0
INTERVAL_S = 6.0
WEAKENED_INTERVAL_S = 6.0      # the partition's hold: the slave is elected after ~3.5 s
WEAKENED_DRAIN_IDLE_S = 10.0   # the weakened run ends its drain once the consumers took nothing new so long
GROUPS = {1: "one SYNC_MASTER group of a master and two slaves",
          2: "two SYNC_MASTER groups (A: a master and two slaves, B: a master and one slave; faults on "
             "\"the master\" pick one group at random)"}


def test_schedule(tmp_path: Path) -> None:
    """Every body answered SEND_OK is taken by the orderly consumers, none out of its key's
    order, none passed by a committed offset before it was taken, whatever the faults; the
    figures per fault go to build/chaos/result.json (the time without service is measured and
    reported, not asserted: a group with no slave it can reach takes no write while the fault
    lasts, RELIABILITY.md's chaos section)."""
    schedule = Schedule.from_env(SHORT_FAULTS, SHORT_SECONDS, INTERVAL_S)
    plane = ControlPlane.from_env()
    outcome = run(tmp_path, schedule, plane=plane)
    written = report.write(outcome.figures, {
        "schedule": f"{','.join(f.value for f in schedule.faults)} for {schedule.seconds:.0f} s, each held "
                    f"{schedule.interval:.0f} s then healed, seed {schedule.seed}",
        "cluster": f"{plane.controllers} controller(s) (name server --controller), {plane.etcd_members} etcd "
                   f"member(s), {GROUPS[plane.groups]} (min_in_sync_replicas {plane.min_in_sync}, "
                   f"ha_max_time_not_caught_up_ms {plane.not_caught_up_ms}), two producers (SDK Producer, "
                   "per-key queues, a sending thread per key), two orderly PushConsumers, a monitor",
        "skipped": outcome.skipped})
    for kind, figures in outcome.figures.items():
        print(f"[chaos] {kind}: {asdict(figures)}")
    assert set(outcome.figures) - {BEFORE_FAULTS}, f"no fault ran: {written}"
    lost = {kind: f.lost for kind, f in outcome.figures.items() if f.lost}
    assert outcome.history is not None
    print(f"[chaos] committed offsets recorded: {len(outcome.history.commits)} moves over "
          f"{len({c.queue for c in outcome.history.commits})} queues")
    assert lost == {}, f"{lost}: {'; '.join(explain_lost(outcome.history)[:10])}"
    assert {kind: f.out_of_order for kind, f in outcome.figures.items() if f.out_of_order} == {}
    skipped = {kind: f.committed_unreceived for kind, f in outcome.figures.items() if f.committed_unreceived}
    assert skipped == {}, f"committed offsets passed acknowledged bodies no consumer had taken: {skipped}"


@pytest.mark.skipif(bool(os.environ.get("RMQ_CHAOS_ETCD")),
                    reason="the weakened run is the single-controller one")
def test_checker_reports_the_loss_of_a_weakened_group(tmp_path: Path) -> None:
    """The checker's own test: the same group as ASYNC_MASTER (acknowledging before a slave
    holds the bytes) under a master partition. The old master keeps answering SEND_OK to the
    producers that still reach it, a slave is elected, the old master drops what it took when it
    rejoins: the checker must count those acknowledged bodies lost."""
    outcome = run(tmp_path, Schedule([Fault.MASTER_PARTITION], 1.0, WEAKENED_INTERVAL_S, 47),
                  role="ASYNC_MASTER", plane=ControlPlane(), drain_idle_s=WEAKENED_DRAIN_IDLE_S,
                  produce_until=written_over_untaken)
    figures = outcome.figures[Fault.MASTER_PARTITION.value]
    print(f"[chaos] weakened (ASYNC_MASTER) master-partition: {asdict(figures)}")
    assert figures.lost > 0
    assert outcome.figures[BEFORE_FAULTS].lost == 0
    # lost, not merely slow: the consumers took the new master's messages at a lost one's offset
    # (the producers went on until the new master had stored some there: written_over_untaken)
    assert outcome.history is not None
    assert any(instead for _, instead in lost_sends(outcome.history))
    assert figures.committed_unreceived > 0    # the consumers committed past them
