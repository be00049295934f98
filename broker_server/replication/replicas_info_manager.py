"""The controller's state (RocketMQ 5 ReplicasInfoManager,
docs/controller.md): per broker group (broker name) its members by broker id and address,
the in-sync set, the master and the master epoch, with where each epoch's master started its
CommitLog. Persisted in the controller's directory, so that a restarted name server keeps
every epoch; heartbeat times are not persisted (a restarted controller gives every member a
full timeout before it elects).

Election (DefaultElectPolicy): when the master has not sent a heartbeat for the failover
timeout, the live member of the in-sync set with the highest CommitLog end becomes master and
the epoch goes up by one. With no live in-sync member nothing changes: electing a member that
may miss acknowledged messages (RocketMQ's enableElectUncleanMaster) is never done."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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

    def to_json(self) -> dict[str, Any]:
        return {"members": {str(i): a for i, a in self.members.items()}, "master_id": self.master_id,
                "epoch": self.epoch, "in_sync": sorted(self.in_sync),
                "epoch_starts": {str(e): o for e, o in self.epoch_starts.items()}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SyncStateInfo:
        return cls({int(i): a for i, a in data["members"].items()}, data["master_id"], data["epoch"],
                   set(data["in_sync"]), {int(e): o for e, o in data["epoch_starts"].items()})


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
    def __init__(self, cluster_name: str, directory: Path, failover_timeout_ms: int,
                 limits: ControllerLimits = ControllerLimits(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cluster_name = cluster_name
        self.path = directory / STATE_FILE
        self.failover_timeout_s = failover_timeout_ms / 1000
        self.limits = limits
        self._clock = clock
        self.groups: dict[str, SyncStateInfo] = {}
        self._live: dict[tuple[str, int], MemberLiveness] = {}

    def load(self) -> None:
        """Read the persisted groups; each known member gets a full timeout from now."""
        content = read_json(self.path)
        if content is None:
            return
        try:
            self.groups = {name: SyncStateInfo.from_json(data) for name, data in content["groups"].items()}
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise ValueError(f"{self.path}: not a controller state file ({error!r})") from None
        now = self._clock()
        self._live = {(name, broker_id): MemberLiveness(now, -1)
                      for name, group in self.groups.items() for broker_id in group.members}

    def persist(self) -> None:
        write_json_atomically(self.path, {"groups": {n: g.to_json() for n, g in self.groups.items()}})

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
            changed |= _confirm_master(group, beat)
        elif group.master_id == beat.broker_id and group.epoch in group.epoch_starts:
            log.warning("broker group %s: master id %d returned without the CommitLog of its epoch %d (it "
                        "reports epoch %d)", beat.broker_name, beat.broker_id, group.epoch, beat.epoch)
            self._elect(beat.broker_name, group, alive_master=True)
        truncate_to = self._truncation(beat, group)
        if changed:
            self.persist()
        return self.assignment(group, truncate_to)

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
                f"state in {self.path} was lost)")

    def _truncation(self, beat: Heartbeat, group: SyncStateInfo) -> int:
        """Where a member of an older epoch cuts its CommitLog: the start of the first epoch
        after its own (everything it holds beyond was never acknowledged under SYNC_MASTER).
        A member new to the group (epoch 0) keeps its CommitLog: nothing says what it holds was
        never acknowledged, and the master refuses it as a slave when it diverges."""
        if group.master_id == beat.broker_id or beat.epoch >= group.epoch or beat.epoch == 0:
            return KEEP_EVERYTHING
        start = group.epoch_starts.get(beat.epoch + 1)
        if start is None:
            raise BrokerError(rmq_pb2.SERVICE_NOT_AVAILABLE,
                               f"the master of epoch {beat.epoch + 1} of broker group {beat.broker_name} has "
                               f"not confirmed its CommitLog start yet; retry")
        return start

    def scan(self) -> None:
        """Elect a new master for every group whose master's heartbeats stopped."""
        for name, group in self.groups.items():
            if group.master_id != NO_MASTER and not self._alive(name, group.master_id):
                self._elect(name, group)

    def _elect(self, name: str, group: SyncStateInfo, alive_master: bool = False) -> None:
        candidates = [i for i in group.in_sync if i != group.master_id and self._alive(name, i)]
        if not candidates:
            return
        elected = max(candidates, key=lambda i: (self._live[(name, i)].max_offset, -i))
        log.warning("broker group %s: replacing master id %d (%s); electing id %d", name, group.master_id,
                    "its store was lost" if alive_master else f"silent for {self.failover_timeout_s:g} s",
                    elected)
        self._make_master(name, group, elected)
        self.persist()

    def _make_master(self, name: str, group: SyncStateInfo, broker_id: int) -> None:
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


def _confirm_master(group: SyncStateInfo, beat: Heartbeat) -> bool:
    """The master's heartbeat in its epoch: where the epoch started (first time) and which
    members are in sync. True when the persisted state changed."""
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
