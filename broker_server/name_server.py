"""`rmq namesrv` (RocketMQ NamesrvController + RouteInfoManager): brokers register their
name, address and topics periodically; a broker silent for longer than the expiry (120 s)
is dropped. Route queries merge every live broker's queues for a topic, so a topic created
with 4 queues on each of two brokers has 8 MessageQueues (topic, brokerName, queueId)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rmq.broker_server.config import NameServerConfig
from rmq.broker_server.grpc_server import SHUTDOWN_GRACE_SECONDS, create_server, wait_for_termination
from rmq.broker_server.metrics import NameServerCollector, serve_metrics
from rmq.broker_server.names import check_topic_name
from rmq.broker_server.server_security import ServerSecurity
from rmq.broker_server.status import OK, RequestError, answers_with_status, illegal_argument, rmq_pb2
from rmq.broker_server.topic_config_manager import TopicConfig
from rmq.request_signing import name_server_id
from rmq.v1 import rmq_pb2_grpc

log = logging.getLogger(__name__)


@dataclass
class BrokerLiveInfo:
    broker_name: str
    address: str
    topics: dict[str, TopicConfig]
    last_update_ms: int


class RouteInfoManager:
    def __init__(self, broker_expiry_ms: int = 120000, clock: Callable[[], float] = time.monotonic) -> None:
        self.broker_expiry_ms = broker_expiry_ms
        self._clock = clock
        self._brokers: dict[str, BrokerLiveInfo] = {}
        self._lock = threading.Lock()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def register_broker(self, broker_name: str, address: str, topics: list[TopicConfig]) -> bool:
        """Record the broker's current topics (replacing the previous set); True when it is new."""
        info = BrokerLiveInfo(broker_name, address, {t.topic_name: t for t in topics}, self._now_ms())
        with self._lock:
            previous = self._brokers.get(broker_name)
            self._brokers[broker_name] = info
        is_new = previous is None or previous.address != address or self._expired(previous)
        if is_new:
            log.info("new broker registered, %s %s with %d topics", broker_name, address, len(topics))
        return is_new

    def unregister_broker(self, broker_name: str) -> bool:
        with self._lock:
            removed = self._brokers.pop(broker_name, None) is not None
        if removed:
            log.info("unregister broker %s", broker_name)
        return removed

    def scan_not_active_broker(self) -> list[str]:
        with self._lock:
            expired = [name for name, info in self._brokers.items() if self._expired(info)]
            for name in expired:
                del self._brokers[name]
        for name in expired:
            log.warning(
                "the broker's channel expired, %s removed after %d ms without a heartbeat",
                name,
                self.broker_expiry_ms,
            )
        return expired

    def live_brokers(self) -> list[BrokerLiveInfo]:
        """Live brokers sorted by name (expired ones excluded even before the scan runs)."""
        with self._lock:
            brokers = [info for info in self._brokers.values() if not self._expired(info)]
        return sorted(brokers, key=lambda info: info.broker_name)

    def pick_topic_route(self, topic: str) -> list[tuple[BrokerLiveInfo, TopicConfig]]:
        return [(info, info.topics[topic]) for info in self.live_brokers() if topic in info.topics]

    def topics(self) -> list[TopicConfig]:
        """Every topic once: queue counts summed over the brokers holding it, permissions or-ed."""
        merged: dict[str, TopicConfig] = {}
        for info in self.live_brokers():
            for name, config in info.topics.items():
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
    async def QueryRoute(self, request, context):
        check_topic_name(request.topic)
        route = self.routes.pick_topic_route(request.topic)
        if not route:
            raise RequestError(
                rmq_pb2.TOPIC_NOT_EXIST, f"no route for topic {request.topic!r}: no live broker holds it"
            )
        return rmq_pb2.QueryRouteResponse(
            status=OK,
            brokers=[
                rmq_pb2.BrokerData(broker_name=info.broker_name, address=info.address) for info, _ in route
            ],
            queue_datas=[
                rmq_pb2.QueueData(
                    broker_name=info.broker_name,
                    read_queue_nums=config.read_queue_nums,
                    write_queue_nums=config.write_queue_nums,
                    perm=config.perm,
                )
                for info, config in route
            ],
        )

    @answers_with_status(rmq_pb2.ListTopicsResponse)
    async def ListTopics(self, request, context):
        return rmq_pb2.ListTopicsResponse(
            status=OK, topics=[config.to_proto() for config in self.routes.topics()]
        )

    @answers_with_status(rmq_pb2.ListBrokersResponse)
    async def ListBrokers(self, request, context):
        return rmq_pb2.ListBrokersResponse(
            status=OK,
            brokers=[
                rmq_pb2.BrokerData(broker_name=info.broker_name, address=info.address)
                for info in self.routes.live_brokers()
            ],
        )


class NameServerService(rmq_pb2_grpc.NameServerServiceServicer):
    def __init__(self, routes: RouteInfoManager) -> None:
        self.routes = routes

    @answers_with_status(rmq_pb2.RegisterBrokerResponse)
    async def RegisterBroker(self, request, context):
        if not request.broker.broker_name or not request.broker.address:
            raise illegal_argument("broker name and address are required")
        self.routes.register_broker(
            request.broker.broker_name,
            request.broker.address,
            [TopicConfig.from_proto(topic) for topic in request.topics],
        )
        return rmq_pb2.RegisterBrokerResponse(status=OK)

    @answers_with_status(rmq_pb2.UnregisterBrokerResponse)
    async def UnregisterBroker(self, request, context):
        self.routes.unregister_broker(request.broker_name)
        return rmq_pb2.UnregisterBrokerResponse(status=OK)


async def serve_name_server(config: NameServerConfig, security: ServerSecurity) -> None:
    routes = RouteInfoManager(config.broker_expiry_ms)
    server = create_server(config.listen, config.grpc_max_message_bytes, security,
                           name_server_id(config.listen))
    rmq_pb2_grpc.add_RouteServiceServicer_to_server(NameServerRouteService(routes), server)
    rmq_pb2_grpc.add_NameServerServiceServicer_to_server(NameServerService(routes), server)
    await server.start()
    security.start(config.listen)
    if config.metrics_listen:
        serve_metrics(config.metrics_listen, security, NameServerCollector(routes))
    scan = asyncio.create_task(_scan_forever(routes, config.broker_scan_interval_ms))
    print(f"rmq namesrv listening on {config.listen}", flush=True)
    await wait_for_termination()
    scan.cancel()
    await server.stop(SHUTDOWN_GRACE_SECONDS)
    await security.stop()
    log.info("name server stopped")


async def _scan_forever(routes: RouteInfoManager, interval_ms: int) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        routes.scan_not_active_broker()
