"""`rmq namesrv` (RocketMQ NamesrvController + RouteInfoManager): brokers register their
name, id, role, address and topics periodically; a broker silent for longer than the expiry
(120 s) is dropped. The members sharing a name form a broker group (master id 0, slaves 1..);
a group's queues are its master's topics (a live slave's when the master is gone) and its
BrokerData lists every live member. Route queries merge every group's queues for a topic, so a
topic created with 4 queues on each of two groups has 8 MessageQueues (topic, brokerName, queueId).
With --controller it also embeds the controller (rmq.broker_server.replication.controller_manager), and of two
members registered as master the one of the newer epoch answers for the group."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.registry import Collector

from rmq.broker_server.config import DEFAULT_CLUSTER_NAME, NameServerConfig
from rmq.broker_server.errors import BrokerError, UserError, illegal_argument
from rmq.broker_server.grpc_aio import Context
from rmq.broker_server.metrics.collectors import NameServerCollector, serve_metrics
from rmq.broker_server.processors.names import check_topic_name
from rmq.broker_server.remoting.service import build_name_server_remoting
from rmq.broker_server.replication.controller_manager import (
    ControllerCollector,
    ControllerService,
    scan_forever,
)
from rmq.broker_server.replication.etcd_client import EtcdClient, EtcdSettings, EtcdUnavailable
from rmq.broker_server.replication.etcd_controller import EtcdGroupStore, EtcdLeadership
from rmq.broker_server.replication.replicas_info_manager import JsonGroupStore, ReplicasInfoManager
from rmq.broker_server.rmq_v1.grpc_server import (
    SHUTDOWN_GRACE_SECONDS,
    create_server,
    generic_only,
    wait_for_termination,
)
from rmq.broker_server.security.cluster_auth import ClusterAuth, load_cluster_secret
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.broker_server.status import OK, answers_with_status
from rmq.request_signing import name_server_id
from rmq.store.private_files import make_dirs
from rmq.topic_config import PERM_WRITE, TopicConfig
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

log = logging.getLogger(__name__)


@dataclass
class BrokerLiveInfo:
    broker_name: str
    address: str
    topics: dict[str, TopicConfig]
    last_update_ms: int
    broker_id: int = 0
    role: rmq_pb2.BrokerRole = rmq_pb2.ASYNC_MASTER
    flight_address: str = ""   # its Arrow Flight data plane (docs/data-plane.md), "" when off
    remoting_address: str = ""   # its RocketMQ 4.x remoting port, if it serves one
    epoch: int = 0   # controller mode: the master epoch it serves in
    cluster_name: str = DEFAULT_CLUSTER_NAME   # brokerClusterName


@dataclass(frozen=True)
class BrokerGroup:
    """The live members of one broker name, sorted by id (RocketMQ BrokerData.brokerAddrs)."""

    broker_name: str
    members: tuple[BrokerLiveInfo, ...]

    @property
    def representative(self) -> BrokerLiveInfo:
        """The master when one is live (of two, the one of the newer epoch: the other was
        replaced by the controller), else the slave with the lowest id."""
        masters = [m for m in self.members if m.role != rmq_pb2.SLAVE]
        return max(masters, key=lambda m: (m.epoch, -m.broker_id)) if masters else self.members[0]

    @property
    def cluster_name(self) -> str:
        return self.representative.cluster_name

    @property
    def has_master(self) -> bool:
        """Only a master takes sends: without one the group's queues are read-only."""
        return self.representative.role != rmq_pb2.SLAVE

    @property
    def topics(self) -> dict[str, TopicConfig]:
        return self.representative.topics

    def to_proto(self) -> rmq_pb2.BrokerData:
        return rmq_pb2.BrokerData(
            broker_name=self.broker_name, address=self.representative.address, cluster_name=self.cluster_name,
            members=[rmq_pb2.BrokerMember(broker_id=m.broker_id, address=m.address, role=m.role,
                                          flight_address=m.flight_address,
                                          remoting_address=m.remoting_address, epoch=m.epoch)
                     for m in self.members])


class RouteInfoManager:
    def __init__(self, broker_expiry_ms: int = 120000, clock: Callable[[], float] = time.monotonic) -> None:
        self.broker_expiry_ms = broker_expiry_ms
        self._clock = clock
        self._brokers: dict[tuple[str, int], BrokerLiveInfo] = {}   # (name, id) -> member
        self._lock = threading.Lock()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def register_broker(self, broker_name: str, address: str, topics: list[TopicConfig], broker_id: int = 0,
                        role: rmq_pb2.BrokerRole = rmq_pb2.ASYNC_MASTER, flight_address: str = "",
                        remoting_address: str = "", epoch: int = 0,
                        cluster_name: str = DEFAULT_CLUSTER_NAME) -> bool:
        """Record the member's current topics (replacing the previous set); True when it is new."""
        info = BrokerLiveInfo(broker_name, address, {t.topic_name: t for t in topics}, self._now_ms(),
                              broker_id, role, flight_address, remoting_address, epoch, cluster_name)
        with self._lock:
            previous = self._brokers.get((broker_name, broker_id))
            self._brokers[(broker_name, broker_id)] = info
        is_new = previous is None or previous.address != address or self._expired(previous)
        if is_new:
            log.info("new broker registered, %s id %d %s with %d topics", broker_name, broker_id, address,
                     len(topics))
        return is_new

    def unregister_broker(self, broker_name: str, broker_id: int = 0) -> bool:
        with self._lock:
            removed = self._brokers.pop((broker_name, broker_id), None) is not None
        if removed:
            log.info("unregister broker %s id %d", broker_name, broker_id)
        return removed

    def scan_not_active_broker(self) -> list[str]:
        """Drop members silent for longer than the expiry; returns their names."""
        with self._lock:
            expired = [key for key, info in self._brokers.items() if self._expired(info)]
            for key in expired:
                del self._brokers[key]
        for name, _ in expired:
            log.warning(
                "the broker's channel expired, %s removed after %d ms without a heartbeat",
                name,
                self.broker_expiry_ms,
            )
        return [name for name, _ in expired]

    def live_brokers(self) -> list[BrokerLiveInfo]:
        """Live members sorted by name and id (expired ones excluded even before the scan runs)."""
        with self._lock:
            brokers = [info for info in self._brokers.values() if not self._expired(info)]
        return sorted(brokers, key=lambda info: (info.broker_name, info.broker_id))

    def broker_groups(self) -> list[BrokerGroup]:
        """Live broker groups sorted by name."""
        groups: dict[str, list[BrokerLiveInfo]] = {}
        for info in self.live_brokers():
            groups.setdefault(info.broker_name, []).append(info)
        return [BrokerGroup(name, tuple(members)) for name, members in groups.items()]

    def pick_topic_route(self, topic: str) -> list[tuple[BrokerGroup, TopicConfig]]:
        return [(group, group.topics[topic]) for group in self.broker_groups() if topic in group.topics]

    def topics(self) -> list[TopicConfig]:
        """Every topic once: queue counts summed over the groups holding it, permissions or-ed."""
        merged: dict[str, TopicConfig] = {}
        for group in self.broker_groups():
            for name, config in group.topics.items():
                seen = merged.get(name)
                merged[name] = (
                    config
                    if seen is None
                    else TopicConfig(
                        name,
                        seen.read_queue_nums + config.read_queue_nums,
                        seen.write_queue_nums + config.write_queue_nums,
                        seen.perm | config.perm,
                    )
                )
        return [merged[name] for name in sorted(merged)]

    def _expired(self, info: BrokerLiveInfo) -> bool:
        return self._now_ms() - info.last_update_ms > self.broker_expiry_ms


class NameServerRouteService(rmq_pb2_grpc.RouteServiceServicer):
    def __init__(self, routes: RouteInfoManager) -> None:
        self.routes = routes

    @answers_with_status(rmq_pb2.QueryRouteResponse)
    async def QueryRoute(self, request: rmq_pb2.QueryRouteRequest,
                         context: Context) -> rmq_pb2.QueryRouteResponse:
        check_topic_name(request.topic)
        route = self.routes.pick_topic_route(request.topic)
        if not route:
            raise BrokerError(
                rmq_pb2.TOPIC_NOT_EXIST, f"no route for topic {request.topic!r}: no live broker holds it"
            )
        return rmq_pb2.QueryRouteResponse(
            status=OK,
            brokers=[group.to_proto() for group, _ in route],
            queue_datas=[
                rmq_pb2.QueueData(
                    broker_name=group.broker_name,
                    read_queue_nums=config.read_queue_nums,
                    write_queue_nums=config.write_queue_nums,
                    perm=config.perm if group.has_master else config.perm & ~PERM_WRITE,
                )
                for group, config in route
            ],
        )

    @answers_with_status(rmq_pb2.ListTopicsResponse)
    async def ListTopics(self, request: rmq_pb2.ListTopicsRequest,
                         context: Context) -> rmq_pb2.ListTopicsResponse:
        return rmq_pb2.ListTopicsResponse(
            status=OK, topics=[config.to_proto() for config in self.routes.topics()]
        )

    @answers_with_status(rmq_pb2.ListBrokersResponse)
    async def ListBrokers(self, request: rmq_pb2.ListBrokersRequest,
                          context: Context) -> rmq_pb2.ListBrokersResponse:
        return rmq_pb2.ListBrokersResponse(
            status=OK,
            brokers=[group.to_proto() for group in self.routes.broker_groups()],
        )


class NameServerService(rmq_pb2_grpc.NameServerServiceServicer):
    def __init__(self, routes: RouteInfoManager) -> None:
        self.routes = routes

    @answers_with_status(rmq_pb2.RegisterBrokerResponse)
    async def RegisterBroker(self, request: rmq_pb2.RegisterBrokerRequest,
                             context: Context) -> rmq_pb2.RegisterBrokerResponse:
        if not request.broker.broker_name or not request.broker.address:
            raise illegal_argument("broker name and address are required")
        self.routes.register_broker(
            request.broker.broker_name,
            request.broker.address,
            [TopicConfig.from_proto(topic) for topic in request.topics],
            request.member.broker_id,
            request.member.role,
            request.member.flight_address,
            request.member.remoting_address,
            request.member.epoch,
            request.broker.cluster_name or DEFAULT_CLUSTER_NAME,
        )
        return rmq_pb2.RegisterBrokerResponse(status=OK)

    @answers_with_status(rmq_pb2.UnregisterBrokerResponse)
    async def UnregisterBroker(self, request: rmq_pb2.UnregisterBrokerRequest,
                               context: Context) -> rmq_pb2.UnregisterBrokerResponse:
        self.routes.unregister_broker(request.broker_name, request.broker_id)
        return rmq_pb2.UnregisterBrokerResponse(status=OK)


async def serve_name_server(config: NameServerConfig, security: ServerSecurity) -> None:
    routes = RouteInfoManager(config.broker_expiry_ms)
    server = create_server(config.listen, config.grpc_max_message_bytes, security,
                           name_server_id(config.listen))
    services = generic_only(server)
    rmq_pb2_grpc.add_RouteServiceServicer_to_server(NameServerRouteService(routes), services)
    rmq_pb2_grpc.add_NameServerServiceServicer_to_server(NameServerService(routes), services)
    tasks: list[Coroutine[Any, Any, None]] = []
    collectors: list[Collector] = [NameServerCollector(routes)]
    leadership: EtcdLeadership | None = None
    if config.controller:
        auth = controller_auth(config, security)
        if config.etcd:
            leadership = await controllers_on_etcd(config)
            replicas = leadership.replicas
            tasks.append(leadership.run_forever(config.controller_scan_interval_ms / 1000))
        else:
            replicas = embed_controller(config)
            tasks.append(scan_forever(replicas, config.controller_scan_interval_ms))
        rmq_pb2_grpc.add_ControllerServiceServicer_to_server(
            ControllerService(replicas, auth, leadership, config.listen), services)
        collectors.append(ControllerCollector(replicas))
    tasks.append(_scan_forever(routes, config.broker_scan_interval_ms))   # once nothing above refused
    if config.metrics_listen:
        serve_metrics(config.metrics_listen, security, *collectors)
    remoting = build_name_server_remoting(config, security, routes)
    await server.start()
    if remoting is not None:
        await remoting.start()
        print(f"rmq namesrv serving RocketMQ 4.x remoting on {config.remoting_listen}", flush=True)
    security.start(config.listen)
    scans = [asyncio.create_task(task) for task in tasks]
    print(f"rmq namesrv listening on {config.listen}{' with the controller' if config.controller else ''}",
          flush=True)
    await wait_for_termination()
    for scan in scans:
        scan.cancel()
    if leadership is not None:
        await leadership.resign()
        await leadership.close()
    if remoting is not None:
        await remoting.stop()
    await server.stop(SHUTDOWN_GRACE_SECONDS)
    await security.stop()
    log.info("name server stopped")


def embed_controller(config: NameServerConfig) -> ReplicasInfoManager:
    """The controller's state, loaded from its directory (UserError when it cannot be)."""
    replicas = ReplicasInfoManager(config.cluster_name, JsonGroupStore(config.controller_path),
                                   config.controller_failover_timeout_ms)
    try:
        make_dirs(config.controller_path)
        replicas.load()
    except (OSError, ValueError) as error:
        raise UserError(f"cannot load the controller's state from {config.controller_path}: {error}"
                        ) from None
    return replicas


async def controllers_on_etcd(config: NameServerConfig) -> EtcdLeadership:
    """This controller's place among the cluster's controllers on etcd; UserError naming the
    endpoints when etcd does not answer at start, or naming both clusters when the prefix is
    another cluster's."""
    settings = EtcdSettings(config.etcd_endpoints, config.etcd_prefix, config.etcd_ca_file,
                            config.etcd_cert_file, config.etcd_key_file, config.etcd_user,
                            config.etcd_password_file)
    store = EtcdGroupStore(EtcdClient(settings), config.etcd_prefix)
    try:
        await store.claim_prefix(config.cluster_name)
    except EtcdUnavailable as error:
        await store.client.close()
        raise UserError(f"the controller cannot reach etcd at {config.etcd}: {error}") from None
    replicas = ReplicasInfoManager(config.cluster_name, store, config.controller_failover_timeout_ms)
    # the lease has its own connection: a slow decision never delays its renewal
    return EtcdLeadership(EtcdClient(settings), store, replicas, config.listen, config.controller_lease_ttl_s)


def controller_auth(config: NameServerConfig, security: ServerSecurity) -> ClusterAuth | None:
    """The cluster secret the controller checks every heartbeat with; UserError when the name
    server runs with --acl without one (an account allowed to register brokers would then decide
    who is master and where CommitLogs are cut)."""
    if config.cluster_secret_file:
        return ClusterAuth(load_cluster_secret(Path(config.cluster_secret_file).expanduser()), "")
    if security.acl_file is not None:
        raise UserError("a name server with --acl and --controller needs --cluster-secret FILE (the file "
                        "every broker of the cluster is given): heartbeats are proven with it")
    log.warning("controller without --cluster-secret: it takes every heartbeat on the caller's word")
    return None


async def _scan_forever(routes: RouteInfoManager, interval_ms: int) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        routes.scan_not_active_broker()
