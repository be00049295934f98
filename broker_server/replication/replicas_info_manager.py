"""The controller's state (RocketMQ 5 ReplicasInfoManager,
docs/controller.md): per broker group (broker name) its members by broker id and address,
the in-sync set, the master and the master epoch, with where each epoch's master started its
CommitLog. Persisted in the controller's directory, so that a restarted name server keeps
every epoch; heartbeat times are not persisted (a restarted controller gives every member a
full timeout before it elects).

Election (DefaultElectPolicy): when the master has not sent a heartbeat for the failover
timeout, the live member of the in-sync set with the highest CommitLog end becomes master and
the epoch goes up by one. With no live in-sync member nothing changes: electing a member that
may miss acknowledged messages (RocketMQ's enableElectUncleanMaster) is never done.

What members say is checked against what the controller already knows (SECURITY.md, the
controller's defences; every heartbeat is also proven with the cluster secret, `ControllerService`):
- the master claiming an epoch older than its confirmed one is refused, never a reason to elect;
- a new master's confirmation below the CommitLog end it was elected with is refused (it never
  held what it claimed): the controller elects again among the members in sync before it;
- a member is never told to cut its CommitLog below what an in-sync slave reported holding in
  that member's epoch (it waits instead, and the controller logs why)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rmq.broker_server.errors import BrokerError, illegal_argument
from rmq.broker_server.json_file import read_json, write_json_atomically
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)

STATE_FILE = "controller.json"
NO_MASTER = -1
KEEP_EVERYTHING = -1


@dataclass
class SyncStateInfo:
    """One broker group as the controller keeps it (persisted)."""

    members: dict[int, str] = field(default_factory=dict)   # broker id -> address
    master_id: int = NO_MASTER
    epoch: int = 0
    in_sync: set[int] = field(default_factory=set)
    epoch_starts: dict[int, int] = field(default_factory=dict)   # epoch -> its master's CommitLog start
    # epoch -> in-sync slave id -> the highest CommitLog end it reported in that epoch: no cut below
    replicated: dict[int, dict[int, int]] = field(default_factory=dict)
    elected_offset: int = -1   # the CommitLog end the master was elected with (its start is no lower)
    electable: set[int] = field(default_factory=set)   # the in-sync set before this master's election

    def to_json(self) -> dict[str, Any]:
        return {"members": {str(i): a for i, a in self.members.items()}, "master_id": self.master_id,
                "epoch": self.epoch, "in_sync": sorted(self.in_sync),
                "epoch_starts": {str(e): o for e, o in self.epoch_starts.items()},
                "replicated": {str(e): {str(i): o for i, o in ends.items()}
                               for e, ends in self.replicated.items()},
                "elected_offset": self.elected_offset, "electable": sorted(self.electable)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SyncStateInfo:
        return cls({int(i): a for i, a in data["members"].items()}, data["master_id"], data["epoch"],
                   set(data["in_sync"]), {int(e): o for e, o in data["epoch_starts"].items()},
                   {int(e): {int(i): o for i, o in ends.items()}
                    for e, ends in data.get("replicated", {}).items()},
                   data.get("elected_offset", -1), set(data.get("electable", ())))

    def first_start_after(self, epoch: int) -> int | None:
        """Where the first confirmed epoch after `epoch` starts (an epoch whose master never
        confirmed was abandoned: the next one's master holds `epoch`'s CommitLog up to its start)."""
        later = [e for e in self.epoch_starts if e > epoch]
        return self.epoch_starts[min(later)] if later else None


class GroupStore(Protocol):
    """Where the controller's groups are kept: a JSON file (one controller) or etcd."""

    where: str   # named in messages

    def load(self) -> dict[str, SyncStateInfo]: ...

    def changed(self, name: str, groups: dict[str, SyncStateInfo]) -> None:
        """Group `name` changed: keep it (a file is written at once; etcd at the next commit)."""


class JsonGroupStore:
    """`controller.json` in the controller's directory, written atomically at every change."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / STATE_FILE
        self.where = str(self.path)

    def load(self) -> dict[str, SyncStateInfo]:
        content = read_json(self.path)
        if content is None:
            return {}
        try:
            return {name: SyncStateInfo.from_json(data) for name, data in content["groups"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ValueError(f"{self.path}: not a controller state file ({error!r})") from None

    def changed(self, name: str, groups: dict[str, SyncStateInfo]) -> None:
        write_json_atomically(self.path, {"groups": {n: g.to_json() for n, g in groups.items()}})


@dataclass(frozen=True)
class Heartbeat:
    """What a member says about itself (ControllerHeartbeatRequest)."""

    broker_name: str
    broker_id: int
    address: str
    epoch: int
    max_offset: int
    in_sync_addresses: tuple[str, ...] = ()


@dataclass(frozen=True)
class ControllerLimits:
    """Bounds on what brokers make the controller keep (LIMIT_EXCEEDED names the setting)."""

    max_groups: int = 1024
    max_members_per_group: int = 16


@dataclass
class MemberLiveness:
    last_heartbeat: float
    max_offset: int


class ReplicasInfoManager:
    def __init__(self, cluster_name: str, store: GroupStore, failover_timeout_ms: int,
                 limits: ControllerLimits = ControllerLimits(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster_name = cluster_name
        self.store = store
        self.failover_timeout_s = failover_timeout_ms / 1000
        self.limits = limits
        self._clock = clock
        self.groups: dict[str, SyncStateInfo] = {}
        self._live: dict[tuple[str, int], MemberLiveness] = {}

    def load(self) -> None:
        """Read the persisted groups; each known member gets a full timeout from now."""
        self.groups = self.store.load()
        now = self._clock()
        self._live = {(name, broker_id): MemberLiveness(now, -1)
                      for name, group in self.groups.items() for broker_id in group.members}

    def persist(self, name: str) -> None:
        self.store.changed(name, self.groups)

    def heartbeat(self, cluster_name: str, beat: Heartbeat) -> rmq_pb2.ControllerHeartbeatResponse:
        """Record a member's heartbeat and answer with its group's master and epoch
        (BrokerError for a member that must not join)."""
        self._check_member(cluster_name, beat)
        group = self.groups.setdefault(beat.broker_name, SyncStateInfo())
        changed = group.members.get(beat.broker_id) != beat.address
        group.members[beat.broker_id] = beat.address
        self._live[(beat.broker_name, beat.broker_id)] = MemberLiveness(self._clock(), beat.max_offset)
        if group.epoch == 0:
            self._make_master(beat.broker_name, group, beat.broker_id)
            changed = True
        elif group.master_id == beat.broker_id and beat.epoch == group.epoch:
            changed |= self._confirm_master(beat, group)
        elif group.master_id == beat.broker_id and group.epoch in group.epoch_starts:
            self._master_behind(beat, group)
        else:
            changed |= _record_replicated(group, beat)
        truncate_to = self._truncation(beat, group)
        if changed:
            self.persist(beat.broker_name)
        return self.assignment(group, truncate_to)

    def _master_behind(self, beat: Heartbeat, group: SyncStateInfo) -> None:
        """The master reports an epoch other than its confirmed one: without any (epoch 0, its
        store was lost) it is replaced; an older one is refused (a master never goes back)."""
        if beat.epoch != 0:
            log.warning("broker group %s: master id %d claims epoch %d, older than its confirmed epoch %d: "
                        "refused", beat.broker_name, beat.broker_id, beat.epoch, group.epoch)
            raise illegal_argument(f"broker {beat.broker_name} id {beat.broker_id} is master of epoch "
                                   f"{group.epoch}, confirmed; it cannot go back to epoch {beat.epoch}")
        log.warning("broker group %s: master id %d returned without the CommitLog of its epoch %d",
                    beat.broker_name, beat.broker_id, group.epoch)
        self._elect(beat.broker_name, group, "its store was lost")

    def _confirm_master(self, beat: Heartbeat, group: SyncStateInfo) -> bool:
        """The master's heartbeat in its epoch: where the epoch started (first time) and which
        members are in sync. True when the persisted state changed. A first confirmation below the
        CommitLog end the master was elected with is refused, and the controller elects again."""
        if group.epoch not in group.epoch_starts and 0 <= beat.max_offset < group.elected_offset:
            self._refuse_confirmation(beat, group)
        return _confirm_master(group, beat)

    def _refuse_confirmation(self, beat: Heartbeat, group: SyncStateInfo) -> None:
        log.warning("broker group %s: id %d was elected master of epoch %d with CommitLog end %d but "
                    "confirms %d: refused, electing again", beat.broker_name, beat.broker_id, group.epoch,
                    group.elected_offset, beat.max_offset)
        del self._live[(beat.broker_name, beat.broker_id)]
        for ends in group.replicated.values():   # what it reported holding is not believed either
            ends.pop(beat.broker_id, None)
        group.in_sync = group.electable - {beat.broker_id}
        self._elect(beat.broker_name, group, "its confirmation was refused")
        self.persist(beat.broker_name)
        raise illegal_argument(
            f"broker {beat.broker_name} id {beat.broker_id} was elected with CommitLog end "
            f"{group.elected_offset} but confirms epoch {group.epoch} at {beat.max_offset}: it does not hold "
            f"what it was elected for")

    def _check_member(self, cluster_name: str, beat: Heartbeat) -> None:
        if cluster_name != self.cluster_name:
            raise illegal_argument(
                f"broker {beat.broker_name} id {beat.broker_id} belongs to cluster {cluster_name!r} but this "
                f"controller manages cluster {self.cluster_name!r}: point --controller at its own cluster's "
                f"name server")
        if beat.broker_id < 0 or not beat.broker_name or not beat.address:
            raise illegal_argument("a member needs a broker name, a broker id of 0 or more and an address")
        group = self.groups.get(beat.broker_name)
        if group is None and len(self.groups) >= self.limits.max_groups:
            raise BrokerError(rmq_pb2.LIMIT_EXCEEDED, f"the controller keeps at most "
                                                       f"{self.limits.max_groups} broker groups")
        group = group or SyncStateInfo()
        known = group.members.get(beat.broker_id)
        if known is None and len(group.members) >= self.limits.max_members_per_group:
            raise BrokerError(rmq_pb2.LIMIT_EXCEEDED, f"broker group {beat.broker_name} has "
                                                       f"{self.limits.max_members_per_group} members already")
        if known is not None and known != beat.address and self._alive(beat.broker_name, beat.broker_id):
            raise illegal_argument(
                f"broker {beat.broker_name} id {beat.broker_id} is already a live member at {known}; "
                f"{beat.address} needs its own --broker-id")
        if beat.epoch > group.epoch:
            raise illegal_argument(
                f"broker {beat.broker_name} id {beat.broker_id} was in master epoch {beat.epoch}, newer than "
                f"this controller's {group.epoch}: it belongs to another controller (or this controller's "
                f"state in {self.store.where} was lost)")

    def _truncation(self, beat: Heartbeat, group: SyncStateInfo) -> int:
        """Where a member of an older epoch cuts its CommitLog: the start of the first epoch
        after its own (everything it holds beyond was never acknowledged under SYNC_MASTER).
        A member new to the group (epoch 0) keeps its CommitLog: nothing says what it holds was
        never acknowledged, and the master refuses it as a slave when it diverges. Never below
        what an in-sync slave reported holding in the member's epoch."""
        if group.master_id == beat.broker_id or beat.epoch >= group.epoch or beat.epoch == 0:
            return KEEP_EVERYTHING
        start = group.first_start_after(beat.epoch)
        if start is None:
            raise BrokerError(rmq_pb2.SERVICE_NOT_AVAILABLE,
                               f"the master of epoch {group.epoch} of broker group {beat.broker_name} has "
                               f"not confirmed its CommitLog start yet; retry")
        floor = max((o for e, ends in group.replicated.items() if e <= beat.epoch for o in ends.values()),
                    default=0)
        if start < floor:
            log.error("broker group %s: id %d of epoch %d would be cut at %d, below the %d an in-sync slave "
                      "held: not truncated", beat.broker_name, beat.broker_id, beat.epoch, start, floor)
            raise BrokerError(rmq_pb2.SERVICE_NOT_AVAILABLE,
                               f"cutting the CommitLog of id {beat.broker_id} at {start} would drop what an "
                               f"in-sync slave held up to {floor} in epoch {beat.epoch}: kept; an operator "
                               f"must decide (docs/controller.md)")
        return start

    def scan(self) -> None:
        """Elect a new master for every group whose master's heartbeats stopped."""
        for name, group in self.groups.items():
            if group.master_id != NO_MASTER and not self._alive(name, group.master_id):
                self._elect(name, group, f"silent for {self.failover_timeout_s:g} s")

    def _elect(self, name: str, group: SyncStateInfo, reason: str) -> None:
        candidates = [i for i in group.in_sync if i != group.master_id and self._alive(name, i)]
        if not candidates:
            return
        elected = max(candidates, key=lambda i: (self._live[(name, i)].max_offset, -i))
        log.warning("broker group %s: replacing master id %d (%s); electing id %d", name, group.master_id,
                    reason, elected)
        self._make_master(name, group, elected, self._live[(name, elected)].max_offset)
        self.persist(name)

    def _make_master(self, name: str, group: SyncStateInfo, broker_id: int, offset: int = -1) -> None:
        group.electable = group.in_sync - {broker_id}
        group.elected_offset = offset
        group.master_id = broker_id
        group.epoch += 1
        group.in_sync = {broker_id}
        log.info("broker group %s: id %d (%s) is master in epoch %d", name, broker_id,
                 group.members[broker_id], group.epoch)

    def _alive(self, name: str, broker_id: int) -> bool:
        live = self._live.get((name, broker_id))
        return live is not None and self._clock() - live.last_heartbeat <= self.failover_timeout_s

    def assignment(self, group: SyncStateInfo, truncate_to: int = KEEP_EVERYTHING
                   ) -> rmq_pb2.ControllerHeartbeatResponse:
        return rmq_pb2.ControllerHeartbeatResponse(
            status=rmq_pb2.Status(code=rmq_pb2.OK), epoch=group.epoch, master_broker_id=group.master_id,
            master_address=group.members.get(group.master_id, ""), truncate_to=truncate_to,
            in_sync_ids=sorted(group.in_sync))


def _record_replicated(group: SyncStateInfo, beat: Heartbeat) -> bool:
    """An in-sync slave's CommitLog end in the current epoch: acknowledged writes may reach it,
    so no member of this epoch is ever cut below it. True when it moved up."""
    ends = group.replicated.get(beat.epoch, {})
    if beat.epoch != group.epoch or beat.broker_id not in group.in_sync or beat.max_offset <= ends.get(
            beat.broker_id, -1):
        return False
    group.replicated[beat.epoch] = {**ends, beat.broker_id: beat.max_offset}
    return True


def _confirm_master(group: SyncStateInfo, beat: Heartbeat) -> bool:
    """Where the master's epoch started (first time) and which members are in sync. True when
    the persisted state changed."""
    changed = False
    if group.epoch not in group.epoch_starts and beat.max_offset >= 0:
        group.epoch_starts[group.epoch] = beat.max_offset
        changed = True
    by_address = {address: broker_id for broker_id, address in group.members.items()}
    in_sync = {beat.broker_id} | {by_address[a] for a in beat.in_sync_addresses if a in by_address}
    if in_sync != group.in_sync:
        group.in_sync = in_sync
        changed = True
    return changed
