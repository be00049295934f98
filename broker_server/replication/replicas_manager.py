"""A broker in controller mode (RocketMQ 5 ReplicasManager,
docs/controller.md): `rmq broker --controller ADDR` asks the controller for its role before it
opens its store, and serves one *term* per assignment.

A term: the controller names the group's master and epoch (and, for a member of an older
epoch, the CommitLog offset the new master started from); the broker opens its store as that
master or as a slave of it, dropping the CommitLog bytes from that offset (never acknowledged
under SYNC_MASTER: the in-sync member elected did not hold them), records the epoch in
`<store>/config/controller_epoch.json`, confirms it to the controller (a new master's first
confirmation tells where its epoch starts) and only then serves. Every heartbeat interval it
reports its CommitLog end and, as master, its in-sync slaves. When an answer names another
master or epoch, a master refuses writes at once (fencing) and the term ends: the broker stops
its services and starts the next term in the same process, on the same port."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rmq.broker_server.broker_controller import BrokerController
from rmq.broker_server.config import BrokerConfig
from rmq.broker_server.errors import BrokerError, UserError
from rmq.broker_server.json_file import read_json, write_json_atomically
from rmq.broker_server.metrics.collectors import BrokerCollector, serve_metrics
from rmq.broker_server.rmq_v1.grpc_server import wait_for_termination
from rmq.broker_server.security.cluster_auth import ClusterAuth, Exchange, load_cluster_secret
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.store import BrokerRole
from rmq.store.private_files import SERVER_UMASK, make_dirs
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

log = logging.getLogger(__name__)

EPOCH_FILE = "controller_epoch.json"
RETRY_S = 1.0
# "the new master has not confirmed its epoch yet": it does at its first heartbeat, so a member
# following it asks again this soon (a whole RETRY_S was up to a second more without a slave, so
# without SYNC_MASTER acknowledgements, after every failover: the chaos runs' logs)
NOT_CONFIRMED_RETRY_S = 0.2
HEARTBEAT_TIMEOUT_S = 3.0
UNKNOWN_OFFSET = -1
# answers that mean "this member must not join" (the broker exits with the reason); any other
# (SERVICE_NOT_AVAILABLE: the new master has not confirmed yet; SYSTEM_ERROR) is asked again
REFUSALS = (rmq_pb2.ILLEGAL_ARGUMENT, rmq_pb2.LIMIT_EXCEEDED)
DENIED = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
# the controller refusing this member's cluster proof so many times in a row (another secret, none,
# a clock off by more than a minute) ends the broker; once may be a proof dated just before a
# controller restart
PROOF_ATTEMPTS = 3


@dataclass(frozen=True)
class RoleAssignment:
    """The controller's answer: the group's master and epoch for this member."""

    epoch: int
    master_id: int
    master_address: str
    truncate_to: int
    in_sync_ids: tuple[int, ...]

    @classmethod
    def from_proto(cls, answer: rmq_pb2.ControllerHeartbeatResponse) -> RoleAssignment:
        return cls(answer.epoch, answer.master_broker_id, answer.master_address, answer.truncate_to,
                   tuple(answer.in_sync_ids))

    def same_term(self, other: RoleAssignment) -> bool:
        return (self.epoch, self.master_id) == (other.epoch, other.master_id)

    def broker_config(self, config: BrokerConfig) -> BrokerConfig:
        """The member's settings for this term: the configured master mode, or SLAVE of the
        master; the metrics endpoint is the manager's, for every term."""
        if self.master_id == config.broker_id:
            return dataclasses.replace(config, metrics_listen="")
        return dataclasses.replace(config, broker_role=BrokerRole.SLAVE, master=self.master_address,
                                   metrics_listen="")


class TermCollector(Collector):
    """The metrics of the term serving now (the scrape endpoint outlives terms), with this
    member's role, epoch and its group's in-sync set."""

    def __init__(self) -> None:
        self.broker: BrokerController | None = None

    def collect(self) -> Iterator[Metric]:
        broker = self.broker
        if broker is None:
            return
        yield from BrokerCollector(broker.metrics_figures()).collect()
        replication = broker.replication
        labels = [broker.config.broker_name, str(broker.config.broker_id)]
        for name, documentation, value in [
            ("rmq_broker_is_master", "1 when this member is its group's master (controller mode)",
             int(not replication.is_slave)),
            ("rmq_master_epoch", "the master epoch this member serves in", replication.member.epoch),
            ("rmq_in_sync_members", "members of the group's in-sync set", len(replication.in_sync_ids)),
        ]:
            gauge = GaugeMetricFamily(name, documentation, labels=["broker", "broker_id"])
            gauge.add_metric(labels, value)
            yield gauge


class NoLeadingController(BrokerError, grpc.RpcError):
    """No controller could decide (none reachable leads at the moment): taken as "the controller
    is unreachable" (a member keeps its role and asks again), as any grpc.RpcError of the call."""

    def __init__(self, message: str) -> None:
        super().__init__(rmq_pb2.SERVICE_NOT_AVAILABLE, message)


class ReplicasManager:
    def __init__(self, config: BrokerConfig, security: ServerSecurity) -> None:
        self.config = config
        self.security = security
        self.epoch_path = config.store_path / "config" / EPOCH_FILE
        self.controllers = config.controller_addresses
        self._channels = {address: security.open_client_channel(address) for address in self.controllers}
        self._current = 0   # the controller asked first: the leader, once one named it
        self.collector = TermCollector()
        # every heartbeat is proven with the cluster secret (the controller refuses it otherwise)
        self._auth = (ClusterAuth(load_cluster_secret(Path(config.cluster_secret_file).expanduser()),
                                  config.broker_name) if config.cluster_secret_file else None)

    def identity(self) -> dict[str, str | int]:
        """Whose epoch the epoch file holds: this member of this group of this cluster."""
        config = self.config
        return {"cluster_name": config.cluster_name, "broker_name": config.broker_name,
                "broker_id": config.broker_id}

    def local_epoch(self) -> int:
        """The epoch this member's CommitLog belongs to (0: never in controller mode);
        UserError when the store was another member's."""
        try:
            content = read_json(self.epoch_path)
        except ValueError as error:
            raise UserError(str(error)) from None
        if not content:
            return 0
        owner = {key: content.get(key) for key in self.identity()}
        if owner != self.identity():
            raise UserError(f"{self.epoch_path}: this store belongs to broker {owner['broker_name']} id "
                            f"{owner['broker_id']} of cluster {owner['cluster_name']!r}, not to broker "
                            f"{self.config.broker_name} id {self.config.broker_id} of cluster "
                            f"{self.config.cluster_name!r}: give each member its own --store-dir")
        return int(content["epoch"])

    def save_epoch(self, epoch: int) -> None:
        make_dirs(self.epoch_path.parent)
        write_json_atomically(self.epoch_path, {"epoch": epoch, **self.identity()})

    async def heartbeat(self, epoch: int, max_offset: int, in_sync_addresses: list[str]
                        ) -> rmq_pb2.ControllerHeartbeatResponse:
        config = self.config
        request = rmq_pb2.ControllerHeartbeatRequest(
            cluster_name=config.cluster_name, broker_name=config.broker_name, broker_id=config.broker_id,
            address=config.broker_address, epoch=epoch, max_offset=max_offset,
            in_sync_addresses=in_sync_addresses)
        reasons: list[str] = []
        for _ in range(len(self.controllers) + 1):
            address = self.controllers[self._current]
            if self._auth is not None:   # a fresh proof per call: a controller refuses a nonce it saw
                self._auth.prove(request, Exchange.CONTROLLER, config.broker_id, config.broker_address)
            try:
                response: rmq_pb2.ControllerHeartbeatResponse = await rmq_pb2_grpc.ControllerServiceStub(
                    self._channels[address]).Heartbeat(request, timeout=HEARTBEAT_TIMEOUT_S)
            except grpc.RpcError as error:
                if len(self.controllers) == 1 or _status(error) in DENIED:
                    raise
                reasons.append(f"{address}: {_code(error)}")
                self._current = (self._current + 1) % len(self.controllers)
                continue
            if not response.not_leader:
                return response
            reasons.append(f"{address}: {response.status.message}")
            self._follow(response.leader_address)
        raise NoLeadingController(f"no controller decides now ({'; '.join(reasons)})")

    def _follow(self, leader: str) -> None:
        """Ask `leader` next when it is one of this broker's controllers, else the next one."""
        self._current = (self.controllers.index(leader) if leader in self.controllers
                         else (self._current + 1) % len(self.controllers))

    async def register(self, terminated: asyncio.Future[None]) -> RoleAssignment | None:
        """This member's assignment, asked every second until the controller gives one
        (None when the process is terminated first; UserError when the controller refuses
        this member)."""
        warned = False
        proofs_refused = 0
        while not terminated.done():
            try:
                answer = await self.heartbeat(self.local_epoch(), UNKNOWN_OFFSET, [])
            except grpc.RpcError as error:
                if _status(error) in DENIED:
                    raise UserError(f"the controller at {self.config.controller} refuses this broker's "
                                    f"credentials: {_code(error)}") from None
                if not warned:
                    log.warning("controller %s unreachable (%s); retrying every %gs", self.config.controller,
                                _code(error), RETRY_S)
                warned = True
            else:
                if answer.status.code == rmq_pb2.OK:
                    return RoleAssignment.from_proto(answer)
                proofs_refused = proofs_refused + 1 if answer.status.code == rmq_pb2.NO_PERMISSION else 0
                if answer.status.code in REFUSALS or proofs_refused >= PROOF_ATTEMPTS:
                    raise UserError(f"the controller at {self.config.controller} refuses this broker: "
                                    f"{answer.status.message}")
                log.info("waiting for the controller (%s): %s", rmq_pb2.Code.Name(answer.status.code),
                         answer.status.message)
                if answer.status.code == rmq_pb2.SERVICE_NOT_AVAILABLE:
                    await asyncio.wait([terminated], timeout=NOT_CONFIRMED_RETRY_S)
                    continue
            await asyncio.wait([terminated], timeout=RETRY_S)
        return None

    async def serve_term(self, terminated: asyncio.Future[None]) -> None:
        """One assignment, from opening the store to the end of the term."""
        assignment = await self.register(terminated)
        if assignment is None:
            return
        truncate_to = assignment.truncate_to if assignment.truncate_to >= 0 else None
        broker = BrokerController(assignment.broker_config(self.config), self.security,
                                  truncate_to=truncate_to)
        broker.load()
        self.save_epoch(assignment.epoch)
        broker.replication.member.epoch = assignment.epoch
        try:
            confirmed = await self._beat(broker, assignment, confirming=True)
        except grpc.RpcError as error:
            log.warning("controller %s unreachable (%s) while confirming epoch %d", self.config.controller,
                        _code(error), assignment.epoch)
            confirmed = False
        if not confirmed:   # the controller moved on meanwhile: ask again
            broker.close_unserved()
            return
        is_master = assignment.master_id == self.config.broker_id
        log.info("term of epoch %d: %s", assignment.epoch, "master" if is_master
                 else f"slave of id {assignment.master_id} at {assignment.master_address}")
        server = await broker.start_serving()
        self.collector.broker = broker
        beats = asyncio.ensure_future(self.heartbeat_until_moved(broker, assignment))
        await asyncio.wait([terminated, beats], return_when=asyncio.FIRST_COMPLETED)
        beats.cancel()
        await asyncio.gather(beats, return_exceptions=True)
        self.collector.broker = None
        # a term change does not unregister: the next term's registration replaces this member's
        # entry, and no name server cut off holds the next term behind its call timeout
        await broker.shutdown(server, unregister=terminated.done())

    async def _beat(self, broker: BrokerController, assignment: RoleAssignment, confirming: bool = False
                    ) -> bool:
        """One heartbeat in `assignment`'s term: False when the controller ended the term.
        `confirming`: the term's first, which only an OK answer in the same term confirms (a
        refused confirmation is never served on)."""
        store = broker.store
        end = store.get_commit_log_max_offset()
        in_sync = store.ha_service.report_in_sync(end) if not broker.replication.is_slave else []
        sent = time.monotonic()
        answer = await self.heartbeat(assignment.epoch, end, in_sync)
        if answer.status.code == rmq_pb2.OK and RoleAssignment.from_proto(answer).same_term(assignment):
            broker.replication.in_sync_ids = list(answer.in_sync_ids)
            if broker.replication.role is BrokerRole.SYNC_MASTER:
                # the controller took the reported slaves as the SyncStateSet: reads end at what
                # all of them hold (a deposed master never serves what it stored alone)
                store.bound_reads(frozenset(in_sync))
            if self.config.controller_master_lease_ms and not broker.replication.is_slave:
                # counted from the heartbeat's sending: the controller heard of this master no earlier
                store.renew_lease(sent + self.config.controller_master_lease_ms / 1000)
            return True
        if answer.status.code not in (rmq_pb2.OK, rmq_pb2.SERVICE_NOT_AVAILABLE) and not confirming:
            log.error("the controller refuses this broker's heartbeat: %s", answer.status.message)
            return True
        return False

    async def heartbeat_until_moved(self, broker: BrokerController, assignment: RoleAssignment) -> None:
        """Returns when the controller names another master or epoch; a master is fenced first."""
        warned = False
        while True:
            await asyncio.sleep(self.config.controller_heartbeat_interval_ms / 1000)
            try:
                if await self._beat(broker, assignment):
                    warned = False
                    continue
            except grpc.RpcError as error:
                if not warned:
                    log.warning("controller %s unreachable (%s); keeping the role of epoch %d",
                                self.config.controller, _code(error), assignment.epoch)
                warned = True
                continue
            if not broker.replication.is_slave:
                broker.store.fence()
            log.warning("the controller moved broker group %s past epoch %d: this member refuses writes and "
                        "starts its next term", self.config.broker_name, assignment.epoch)
            return

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()


def _status(error: grpc.RpcError) -> grpc.StatusCode | None:
    """The call's status code (grpc.aio's errors are no grpc.Call); None for an error of no call."""
    code = getattr(error, "code", None)
    return code() if callable(code) else None


def _code(error: grpc.RpcError) -> str:
    """One line: the status code and details of a failed call, else what the error says."""
    status = _status(error)
    if status is None:
        return str(error)
    details = getattr(error, "details", None)
    return f"{status.name}: {details()}" if callable(details) and details() else status.name


async def serve_in_controller_mode(config: BrokerConfig, security: ServerSecurity) -> None:
    """Serve term after term until SIGTERM/SIGINT."""
    if security.acl_file is not None and not config.cluster_secret_file:
        raise UserError("a broker with --acl and --controller needs --cluster-secret FILE (the same file on "
                        "every member of the group): any term may make it a slave")
    os.umask(SERVER_UMASK)   # every file this process creates is its user's alone
    terminated = asyncio.ensure_future(wait_for_termination())
    manager = ReplicasManager(config, security)
    if config.metrics_listen:
        serve_metrics(config.metrics_listen, security, manager.collector)
    try:
        while not terminated.done():
            await manager.serve_term(terminated)
    finally:
        terminated.cancel()
        await manager.close()
