"""The controller embedded in `rmq namesrv --controller` (RocketMQ 5 ControllerManager,
docs/controller.md): serves ControllerService.Heartbeat from the
brokers started with --controller and checks every scan interval whether a group's master
went silent (ReplicasInfoManager elects). One controller per cluster: a single point of
coordination, not of data — while it is down, brokers keep their roles and keep serving;
only a failover waits for it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from rmq.broker_server.grpc_aio import Context
from rmq.broker_server.replication.replicas_info_manager import Heartbeat, ReplicasInfoManager
from rmq.broker_server.status import answers_with_status
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

log = logging.getLogger(__name__)


class ControllerService(rmq_pb2_grpc.ControllerServiceServicer):
    def __init__(self, replicas: ReplicasInfoManager) -> None:
        self.replicas = replicas

    @answers_with_status(rmq_pb2.ControllerHeartbeatResponse)
    async def Heartbeat(self, request: rmq_pb2.ControllerHeartbeatRequest,
                        context: Context) -> rmq_pb2.ControllerHeartbeatResponse:
        return self.replicas.heartbeat(request.cluster_name, Heartbeat(
            request.broker_name, request.broker_id, request.address, request.epoch, request.max_offset,
            tuple(request.in_sync_addresses)))


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
        for name, documentation, value in [
            ("rmq_controller_master_id", "the broker id of the group's master", lambda g: g.master_id),
            ("rmq_controller_master_epoch", "the group's master epoch", lambda g: g.epoch),
            ("rmq_controller_in_sync_members", "members of the in-sync set", lambda g: len(g.in_sync)),
        ]:
            gauge = GaugeMetricFamily(name, documentation, labels=["broker"])
            for broker, group in groups:
                gauge.add_metric([broker], value(group))
            yield gauge
