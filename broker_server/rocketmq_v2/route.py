"""QueryRoute and QueryAssignment for RocketMQ 5 clients (spec rocketmq-v2-protocol.md §1, §3.8;
proxy RouteActivity): every broker holding the topic, as the name servers know it when the
broker has some (else this broker alone), each with its advertised address as endpoints the
client can reach, `broker.id = 0` and every message type accepted."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from rmq.broker_server.processors.pop_message_processor import ALL_QUEUES  # an assignment naming a broker
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.rocketmq_v2.status import V2Error
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.topic_config import PERM_READ, PERM_WRITE
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

log = logging.getLogger(__name__)
ACCEPTED_TYPES = (v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION)
NAMESRV_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class BrokerQueues:
    """One broker's queues of a topic (rmq.v1 QueueData with the broker's address)."""

    broker_name: str
    address: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


UNSPECIFIED_HOSTS = ("0.0.0.0", "::", "[::]")


def reachable(address: str, access_point: v2.Endpoints) -> str:
    """`address`, or (when it listens on every interface, which no client can dial) the host the
    client reached this broker at, with our port."""
    host, _, port = address.rpartition(":")
    if host not in UNSPECIFIED_HOSTS or not access_point.addresses:
        return address
    return f"{access_point.addresses[0].host}:{port}"


def endpoints(address: str) -> v2.Endpoints:
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        scheme = v2.IPv4 if ipaddress.ip_address(host).version == 4 else v2.IPv6
    except ValueError:
        scheme = v2.DOMAIN_NAME
    return v2.Endpoints(scheme=scheme, addresses=[v2.Address(host=host, port=int(port))])


def permission(queue_id: int, broker: BrokerQueues) -> v2.Permission:
    readable = queue_id < broker.read_queue_nums and broker.perm & PERM_READ
    writeable = queue_id < broker.write_queue_nums and broker.perm & PERM_WRITE
    if readable and writeable:
        return v2.READ_WRITE
    return v2.READ if readable else v2.WRITE if writeable else v2.NONE


def broker_resource(broker: BrokerQueues) -> v2.Broker:
    return v2.Broker(name=broker.broker_name, id=0, endpoints=endpoints(broker.address))


def message_queues(topic: v2.Resource, brokers: list[BrokerQueues]) -> list[v2.MessageQueue]:
    return [
        v2.MessageQueue(topic=topic, id=queue_id, permission=permission(queue_id, broker),
                        broker=broker_resource(broker), accept_message_types=ACCEPTED_TYPES)
        for broker in brokers
        for queue_id in range(max(broker.read_queue_nums, broker.write_queue_nums))
    ]


def assignments(topic: v2.Resource, brokers: list[BrokerQueues], fifo: bool) -> list[v2.Assignment]:
    """Proxy QueryAssignment: one entry per readable broker for a concurrent group (its
    receives pop every queue), one per readable queue for a FIFO group."""
    if fifo:
        return [v2.Assignment(message_queue=mq) for mq in message_queues(topic, brokers)
                if mq.permission in (v2.READ, v2.READ_WRITE)]
    return [
        v2.Assignment(message_queue=v2.MessageQueue(topic=topic, id=ALL_QUEUES, permission=v2.READ_WRITE,
                                                    broker=broker_resource(broker),
                                                    accept_message_types=ACCEPTED_TYPES))
        for broker in brokers if broker.perm & PERM_READ
    ]


class RouteResolver:
    def __init__(self, broker_name: str, broker_address: str, topics: TopicConfigManager,
                 namesrv_addresses: list[str], open_channel: Callable[[str], grpc.aio.Channel]) -> None:
        self.broker_name = broker_name
        self.broker_address = broker_address
        self.topics = topics
        self.namesrv_addresses = namesrv_addresses
        self.open_channel = open_channel

    async def brokers(self, topic: str, access_point: v2.Endpoints) -> list[BrokerQueues]:
        """The brokers holding `topic` (TOPIC_NOT_FOUND when none does); `access_point` is where
        the client reached this broker (QueryRouteRequest.endpoints)."""
        for address in self.namesrv_addresses:
            try:
                found = await self._from_namesrv(address, topic)
            except grpc.RpcError as error:
                log.warning("route of %s from name server %s failed: %s", topic, address, error.code())
                continue
            if found:
                return found
        config = self.topics.get(topic)
        if config is None:
            raise V2Error(v2.TOPIC_NOT_FOUND, f"topic {topic!r} does not exist")
        return [BrokerQueues(self.broker_name, reachable(self.broker_address, access_point),
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
