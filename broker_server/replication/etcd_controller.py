"""The controller on etcd (docs/controller.md, "Controller on etcd"): several controllers
(`rmq namesrv --controller --etcd HOST:PORT,...`) share each broker group's state in etcd and
elect their leader there; only the leader decides.

Keys, under `--etcd-prefix` P (two clusters sharing an etcd use two prefixes):
- `P/cluster`: the cluster name; a controller of another cluster on the same prefix is refused at
  start with both names.
- `P/leader`: the leading controller's address, bound to its lease (TTL `controller_lease_ttl_s`):
  created only when absent, so one controller leads; when the leader dies its lease expires, the
  key goes, and another controller creates it.
- `P/groups/<broker name>`: a group's SyncStateInfo as JSON (members, in-sync set, master, epoch,
  each epoch's start, what in-sync slaves held).

Every write is one etcd transaction that succeeds only while the key is still at the revision this
leader last read or wrote it at and the leader key is still the one this leader created: a deposed
leader (its lease gone, or a newer leader's decision already written) writes nothing. A group key
changed by anyone else to an older epoch is refused, logged and rewritten with the leader's state
(the epoch only moves forward); a newer one is adopted (the decision at hand is dropped and the
member asks again)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from rmq.broker_server.errors import UserError
from rmq.broker_server.replication.etcd_client import (
    EtcdClient,
    EtcdUnavailable,
    create_revision_is,
    key_range,
    mod_revision_is,
    put,
    read,
)
from rmq.broker_server.replication.replicas_info_manager import ReplicasInfoManager, SyncStateInfo
from rmq.etcd import rpc_pb2

log = logging.getLogger(__name__)

POLL_S = 0.5            # how often a controller renews its lease or tries to lead
# a renewal's deadline on one etcd endpoint: short enough that, when one member does not answer
# (stopped, cut off), the next endpoint renews within the lease's TTL (2 s: POLL_S + this + the next call)
RENEW_TIMEOUT_S = 0.7
UNAVAILABLE_LOG_S = 10.0   # while etcd does not answer, one line this often says so


def decode_group(value: bytes) -> SyncStateInfo:
    return SyncStateInfo.from_json(json.loads(value))


def encode_group(group: SyncStateInfo) -> bytes:
    return json.dumps(group.to_json(), sort_keys=True).encode()


@dataclass
class EtcdGroupStore:
    """The groups in etcd (a GroupStore): `changed` marks a group, `commit` writes the marked ones."""

    client: EtcdClient
    prefix: str
    where: str = ""
    revisions: dict[str, int] = field(default_factory=dict)   # group -> mod_revision last read or written
    dirty: set[str] = field(default_factory=set)
    leader_revision: int = 0   # create_revision of the leader key this controller holds (0: not leader)
    _loaded: dict[str, SyncStateInfo] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.prefix = self.prefix.rstrip("/")
        self.where = f"etcd {','.join(self.client.settings.endpoints)} under {self.prefix}/"

    def key(self, name: str) -> bytes:
        return f"{self.prefix}/groups/{name}".encode()

    @property
    def leader_key(self) -> bytes:
        return f"{self.prefix}/leader".encode()

    async def claim_prefix(self, cluster_name: str) -> None:
        """The prefix holds this cluster's state (or nothing yet); UserError naming both clusters
        when another cluster's controllers use it."""
        key = f"{self.prefix}/cluster".encode()
        answer = await self.client.txn([create_revision_is(key, 0)], [put(key, cluster_name.encode())],
                                       [read(key)])
        if answer.succeeded:
            return
        owner = answer.responses[0].response_range.kvs[0].value.decode(errors="replace")
        if owner != cluster_name:
            raise UserError(f"etcd prefix {self.prefix}/ holds the controller state of cluster {owner!r}, "
                            f"not {cluster_name!r}: give each cluster its own --etcd-prefix")

    async def fetch(self) -> None:
        """Read every group (what `load` then returns)."""
        groups_prefix = f"{self.prefix}/groups/".encode()
        answer = await self.client.range(groups_prefix, key_range(groups_prefix))
        self._loaded, self.revisions = {}, {}
        for kv in answer.kvs:
            name = kv.key[len(groups_prefix):].decode()
            try:
                self._loaded[name] = decode_group(kv.value)
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                log.error("etcd key %s is not a controller group (%r): ignored until this controller writes "
                          "it", kv.key.decode(errors="replace"), error)
            self.revisions[name] = kv.mod_revision
        self.dirty.clear()

    def load(self) -> dict[str, SyncStateInfo]:
        return dict(self._loaded)

    def changed(self, name: str, groups: dict[str, SyncStateInfo]) -> None:
        self.dirty.add(name)

    async def commit(self, replicas: ReplicasInfoManager) -> bool:
        """Write every changed group; False when a decision could not be written (this controller
        no longer leads, or a newer state was found and adopted): nothing may be answered from it."""
        for name in sorted(self.dirty):
            if not await self._write(name, replicas):
                return False
            self.dirty.discard(name)
        return True

    async def _write(self, name: str, replicas: ReplicasInfoManager) -> bool:
        key = self.key(name)
        for _ in range(2):   # once more after refusing an older hand-written state
            group = replicas.groups[name]
            answer = await self.client.txn(
                [mod_revision_is(key, self.revisions.get(name, 0)),
                 create_revision_is(self.leader_key, self.leader_revision)],
                [put(key, encode_group(group))], [read(key), read(self.leader_key)])
            if answer.succeeded:
                self.revisions[name] = answer.header.revision
                return True
            current, leader = (response.response_range.kvs for response in answer.responses)
            if not leader or leader[0].create_revision != self.leader_revision:
                log.warning("this controller no longer leads (etcd key %s changed): decision for broker "
                            "group %s not written", self.leader_key.decode(), name)
                self.leader_revision = 0
                return False
            if not self._adopt_or_refuse(name, current[0] if current else None, replicas):
                return False
        return False

    def _adopt_or_refuse(self, name: str, kv: rpc_pb2.KeyValue | None, replicas: ReplicasInfoManager) -> bool:
        """Someone else wrote group `name`: an older epoch (or garbage) is refused (True: write ours
        over it); a state as new or newer is adopted (False: the decision at hand is dropped)."""
        ours = replicas.groups[name]
        self.revisions[name] = kv.mod_revision if kv is not None else 0
        try:
            theirs = decode_group(kv.value) if kv is not None else None
        except (ValueError, KeyError, TypeError, AttributeError):
            theirs = None
        if theirs is None or theirs.epoch < ours.epoch:
            log.error("etcd key %s was changed outside the controller (%s): refused, this controller's "
                      "epoch %d of broker group %s is written again", self.key(name).decode(),
                      "deleted or unreadable" if theirs is None else f"epoch {theirs.epoch}", ours.epoch,
                      name)
            return True
        log.warning("broker group %s: etcd holds epoch %d (this controller had %d): adopted", name,
                    theirs.epoch, ours.epoch)
        replicas.groups[name] = theirs
        return False


class EtcdLeadership:
    """Campaign for `P/leader` with a lease, renew it while leading, and step down when it cannot
    be renewed in time; while leading, elect for silent masters (the scan)."""

    def __init__(self, client: EtcdClient, store: EtcdGroupStore, replicas: ReplicasInfoManager,
                 address: str, lease_ttl_s: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.store = store
        self.replicas = replicas
        self.address = address
        self.lease_ttl_s = lease_ttl_s
        self._clock = clock
        self.lease = 0
        self._other_leader = ""   # the address the leader key names while another controller leads
        self.lock = asyncio.Lock()   # one decision at a time: a heartbeat's or the scan's, then its commit
        self._renewed = 0.0
        self._unavailable_logged = -UNAVAILABLE_LOG_S

    @property
    def leading(self) -> bool:
        return self.store.leader_revision != 0

    @property
    def leader_address(self) -> str:
        """Whom a follower names as the leader: never itself once it no longer leads (a write
        that found the leader key changed deposes it before its next renewal says who leads)."""
        return self.address if self.leading else self._other_leader

    async def run_forever(self, scan_interval_s: float) -> None:
        """Two loops: the lease (renewed, or the lead tried for, every POLL_S) and the scan. Apart,
        so that a scan's etcd write stuck on a member that does not answer never delays a renewal
        past the lease's TTL (which deposed the leader and restarted every failover timeout)."""
        await asyncio.gather(self._forever(self.tick, POLL_S), self._forever(self.scan, scan_interval_s))

    async def _forever(self, step: Callable[[], Awaitable[None]], interval_s: float) -> None:
        while True:
            await self.attempt(step)
            await asyncio.sleep(interval_s)

    async def attempt(self, step: Callable[[], Awaitable[None]]) -> None:
        """One round of a loop: etcd not answering is logged (and deposes a leader that could
        not renew for the TTL), and nothing else ends the loop."""
        try:
            await step()
        except EtcdUnavailable as error:
            self._unavailable(error)
        except Exception:   # never die silently: these loops are the controller's lead
            log.exception("controller leadership step failed; stepping down and trying again")
            self.step_down("an unexpected error")

    async def scan(self) -> None:
        """While leading: elect for silent masters. It waits for no decision under way (the next
        scan does it)."""
        if self.leading and not self.lock.locked():
            async with self.lock:
                self.replicas.scan()
                await self.store.commit(self.replicas)

    async def tick(self) -> None:
        if self.leading:
            ttl = await self.client.keep_alive(self.lease, RENEW_TIMEOUT_S)
            if ttl <= 0:
                self.step_down("its etcd lease expired")
            else:
                self._renewed = self._clock()
            return
        if self.lease and await self.client.keep_alive(self.lease, RENEW_TIMEOUT_S) <= 0:
            self.lease = 0   # a follower's lease runs out unless renewed too
        if self.lease == 0:
            self.lease = await self.client.grant_lease(self.lease_ttl_s)
        key = self.store.leader_key
        answer = await self.client.txn([create_revision_is(key, 0)],
                                       [put(key, self.address.encode(), self.lease)], [read(key)])
        if answer.succeeded:
            await self._lead(answer.header.revision)
            return
        holder = answer.responses[0].response_range.kvs
        if holder and holder[0].lease == self.lease:
            # this controller created the key (bound to its lease) but never learned it did: the
            # answer was lost (a deadline, an endpoint stopped after the write) and the call was made
            # again. It leads; were it to follow, it would name itself the leader and keep the
            # key alive with its renewals: no controller would lead until this one died.
            await self._lead(holder[0].create_revision)
            return
        self._other_leader = holder[0].value.decode(errors="replace") if holder else ""

    async def _lead(self, revision: int) -> None:
        async with self.lock:
            await self.store.fetch()
            self.replicas.load()   # every known member gets a full failover timeout from now
            self.store.leader_revision = revision
            self._other_leader = ""
            self._renewed = self._clock()
        log.warning("this controller (%s) leads the controllers of cluster %s (%s); %d broker groups",
                    self.address, self.replicas.cluster_name, self.store.where, len(self.replicas.groups))

    def step_down(self, reason: str) -> None:
        if self.leading:
            log.warning("this controller (%s) no longer leads: %s", self.address, reason)
        self.store.leader_revision = 0
        self.lease = 0
        self._other_leader = ""

    def _unavailable(self, error: EtcdUnavailable) -> None:
        now = self._clock()
        if self.leading and now - self._renewed > self.lease_ttl_s:
            self.step_down(f"its lease could not be renewed for {self.lease_ttl_s} s")
        if now - self._unavailable_logged >= UNAVAILABLE_LOG_S:
            self._unavailable_logged = now
            log.error("etcd does not answer (%s): no failover until it does; brokers keep their roles and "
                      "keep serving", error)

    async def close(self) -> None:
        for client in {id(c): c for c in (self.client, self.store.client)}.values():
            await client.close()

    async def resign(self) -> None:
        """On a clean stop: give the lead up at once (another controller takes it without waiting
        for the lease to expire)."""
        if self.lease:
            try:
                await self.client.revoke_lease(self.lease)
            except EtcdUnavailable:
                pass
        self.step_down("stopping")
