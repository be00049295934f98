"""The controller embedded in `rmq namesrv --controller` (RocketMQ 5 ControllerManager,
docs/controller.md): serves ControllerService.Heartbeat from the
brokers started with --controller and checks every scan interval whether a group's master
went silent (ReplicasInfoManager elects). One controller per cluster: a single point of
coordination, not of data — while it is down, brokers keep their roles and keep serving;
only a failover waits for it.

With a cluster secret (`rmq namesrv --controller --cluster-secret FILE`, the same file as every
broker's) each heartbeat must carry the member's proof (rmq.broker_server.security.cluster_auth):
an account allowed to register brokers is not enough to tell the controller who holds what."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.grpc_aio import Context
from rmq.broker_server.replication.etcd_client import EtcdUnavailable
from rmq.broker_server.replication.etcd_controller import EtcdLeadership
from rmq.broker_server.replication.replicas_info_manager import Heartbeat as MemberBeat
from rmq.broker_server.replication.replicas_info_manager import ReplicasInfoManager, SyncStateInfo
from rmq.broker_server.security.cluster_auth import ClusterAuth, ProofRefused
from rmq.broker_server.security.refusal_log import RefusalLog
from rmq.broker_server.status import answers_with_status
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

log = logging.getLogger(__name__)


class ControllerService(rmq_pb2_grpc.ControllerServiceServicer):
    def __init__(self, replicas: ReplicasInfoManager, auth: ClusterAuth | None = None,
                 leadership: EtcdLeadership | None = None, address: str = "") -> None:
        """`auth`: the cluster secret every heartbeat is proven with (None: heartbeats are taken on
        the word of whoever may call the service). `leadership`: controllers on etcd, where only
        the leader decides and a decision is answered once etcd holds it (None: one controller,
        its state in a file)."""
        self.replicas = replicas
        self.auth = auth
        self.leadership = leadership
        self.address = address   # where brokers reach this controller (its name server's --listen)
        self.refusals = RefusalLog()

    @answers_with_status(rmq_pb2.ControllerHeartbeatResponse)
    async def Heartbeat(self, request: rmq_pb2.ControllerHeartbeatRequest,
                        context: Context) -> rmq_pb2.ControllerHeartbeatResponse:
        if self.auth is not None:
            try:
                self.auth.admit_member(request)
            except ProofRefused as refused:
                self.refusals.record("ControllerService.Heartbeat", context.peer(), "NO_PERMISSION",
                                     refused.message)
                raise
        beat = MemberBeat(request.broker_name, request.broker_id, request.address, request.epoch,
                         request.max_offset, tuple(request.in_sync_addresses))
        if self.leadership is None:
            return self.replicas.heartbeat(request.cluster_name, beat)
        return await self._decide(self.leadership, request.cluster_name, beat)

    @answers_with_status(rmq_pb2.DescribeControllerResponse)
    async def DescribeController(self, request: rmq_pb2.DescribeControllerRequest,
                                 context: Context) -> rmq_pb2.DescribeControllerResponse:
        leadership = self.leadership
        ok = rmq_pb2.Status(code=rmq_pb2.OK)
        if leadership is not None and not leadership.leading:
            return rmq_pb2.DescribeControllerResponse(status=ok, not_leader=True,
                                                      leader_address=leadership.leader_address)
        return rmq_pb2.DescribeControllerResponse(
            status=ok, leader_address=leadership.address if leadership is not None else self.address,
            groups=[rmq_pb2.ControllerGroup(broker_name=name, epoch=g.epoch, master_broker_id=g.master_id,
                                            in_sync_ids=sorted(g.in_sync))
                    for name, g in sorted(self.replicas.groups.items())])

    async def _decide(self, leadership: EtcdLeadership, cluster_name: str, beat: MemberBeat
                      ) -> rmq_pb2.ControllerHeartbeatResponse:
        """The leader's answer, once etcd holds what it decided; "not leader, ask X" otherwise."""
        if not leadership.leading:
            return not_leader(leadership.leader_address)
        async with leadership.lock:
            try:
                answer = self.replicas.heartbeat(cluster_name, beat)
            except BrokerError:
                await _commit(leadership)   # an election the refusal made is kept too
                raise
            if not await _commit(leadership):
                return not_leader(leadership.leader_address)
            return answer


async def _commit(leadership: EtcdLeadership) -> bool:
    try:
        return await leadership.store.commit(leadership.replicas)
    except EtcdUnavailable as error:
        log.warning("decision not written to etcd: %s", error)
        return False


def not_leader(leader_address: str) -> rmq_pb2.ControllerHeartbeatResponse:
    return rmq_pb2.ControllerHeartbeatResponse(
        status=rmq_pb2.Status(code=rmq_pb2.SERVICE_NOT_AVAILABLE,
                              message=f"not the leading controller; the leader is {leader_address}"
                              if leader_address else "no controller leads at the moment; ask again"),
        not_leader=True, leader_address=leader_address)


async def scan_forever(replicas: ReplicasInfoManager, interval_ms: int) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            replicas.scan()
        except OSError as error:   # the election stands in memory; the next change writes it again
            log.error("controller state not persisted: %s", error)


class ControllerCollector(Collector):
    """Per broker group: the master's broker id, the master epoch and the in-sync set's size."""

    def __init__(self, replicas: ReplicasInfoManager) -> None:
        self.replicas = replicas

    def collect(self) -> Iterator[Metric]:
        groups = sorted(self.replicas.groups.items())
        gauges: list[tuple[str, str, Callable[[SyncStateInfo], int]]] = [
            ("rmq_controller_master_id", "the broker id of the group's master", lambda g: g.master_id),
            ("rmq_controller_master_epoch", "the group's master epoch", lambda g: g.epoch),
            ("rmq_controller_in_sync_members", "members of the in-sync set", lambda g: len(g.in_sync)),
        ]
        for name, documentation, value in gauges:
            gauge = GaugeMetricFamily(name, documentation, labels=["broker"])
            for broker, group in groups:
                gauge.add_metric([broker], value(group))
            yield gauge
