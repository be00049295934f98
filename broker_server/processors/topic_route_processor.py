"""Route lookups, one processor for every protocol (RocketMQ: the name server's
ClientRequestProcessor.getRouteInfoByTopic and the proxy's RouteActivity, which answer what a
RocketMQ broker does not): rmq.v1 QueryRoute, ListTopics and ListBrokers, 4.x
GET_ROUTEINFO_BY_TOPIC, RocketMQ 5 QueryRoute and QueryAssignment. It answers protocol-neutral
records (`TopicConfig`, `BrokerQueues`) and refuses with `TopicRouteNotFound`; each adapter renders
its own form and wording."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from rmq.broker_server.errors import TopicRouteNotFound
from rmq.broker_server.processors.names import AUTO_CREATE_TOPIC_KEY
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.topic_config import TopicConfig
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

log = logging.getLogger(__name__)
NAMESRV_TIMEOUT_S = 3.0
UNSPECIFIED_HOSTS = ("0.0.0.0", "::", "[::]")


@dataclass(frozen=True)
class BrokerQueues:
    """One broker's queues of a topic (rmq.v1 QueueData with the broker's address)."""

    broker_name: str
    address: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


def reachable(address: str, reached_host: str | None) -> str:
    """`address`, or (when it listens on every interface, which no client can dial) the host the
    client reached this broker at, with our port."""
    host, _, port = address.rpartition(":")
    if host not in UNSPECIFIED_HOSTS or not reached_host:
        return address
    return f"{reached_host}:{port}"


class TopicRouteProcessor:
    def __init__(self, broker_name: str, broker_address: str, topics: TopicConfigManager,
                 namesrv_addresses: list[str], open_channel: Callable[[str], grpc.aio.Channel]) -> None:
        self.broker_name = broker_name
        self.broker_address = broker_address
        self.topics = topics
        self.namesrv_addresses = namesrv_addresses
        self.open_channel = open_channel

    def own_route(self, topic: str, *, through_default_topic: bool = False) -> TopicConfig:
        """This broker's queues of `topic` (TopicRouteNotFound when it does not hold it). With
        `through_default_topic`, a 4.x producer's lookup of the default topic (TBW102) is answered
        with the default queue numbers while topics are created on first send."""
        config = self.topics.get(topic)
        if (config is None and through_default_topic and topic == AUTO_CREATE_TOPIC_KEY
                and self.topics.auto_create):
            queues = self.topics.default_queue_nums
            config = TopicConfig(topic, queues, queues)
        if config is None:
            raise TopicRouteNotFound(topic, self.broker_name)
        return config

    def all_topics(self) -> list[TopicConfig]:
        return self.topics.all()

    async def brokers(self, topic: str, reached_host: str | None) -> list[BrokerQueues]:
        """Every broker holding `topic`, as the name servers know it when they know some, else this
        broker alone (TopicRouteNotFound when it does not hold it); `reached_host` is the host the
        client reached this broker at."""
        for address in self.namesrv_addresses:
            try:
                found = await self._from_namesrv(address, topic)
            except grpc.RpcError as error:
                log.warning("route of %s from name server %s failed: %s", topic, address, error.code())
                continue
            if found:
                return found
        config = self.own_route(topic)
        return [BrokerQueues(self.broker_name, reachable(self.broker_address, reached_host),
                             config.read_queue_nums, config.write_queue_nums, config.perm)]

    async def _from_namesrv(self, address: str, topic: str) -> list[BrokerQueues]:
        async with self.open_channel(address) as channel:
            response = await rmq_pb2_grpc.RouteServiceStub(channel).QueryRoute(
                rmq_pb2.QueryRouteRequest(topic=topic), timeout=NAMESRV_TIMEOUT_S)
        addresses = {broker.broker_name: broker.address for broker in response.brokers}
        return [
            BrokerQueues(data.broker_name, addresses[data.broker_name], data.read_queue_nums,
                         data.write_queue_nums, data.perm)
            for data in sorted(response.queue_datas, key=lambda d: d.broker_name)
            if data.broker_name in addresses
        ]
