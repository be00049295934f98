"""QueryRoute and QueryAssignment for RocketMQ 5 clients (spec rocketmq-v2-protocol.md §1, §3.8;
proxy RouteActivity): TopicRouteProcessor's brokers holding the topic rendered as message queues,
each with its advertised address as endpoints the client can reach, `broker.id = 0` and every
message type accepted."""

from __future__ import annotations

import ipaddress

from rmq.broker_server.errors import TopicRouteNotFound
from rmq.broker_server.processors.pop_message_processor import ALL_QUEUES  # an assignment naming a broker
from rmq.broker_server.processors.topic_route_processor import BrokerQueues, TopicRouteProcessor
from rmq.broker_server.rocketmq_v2.status import V2Error
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.topic_config import PERM_READ, PERM_WRITE

ACCEPTED_TYPES = (v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION)


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


async def routed_brokers(routes: TopicRouteProcessor, topic: str,
                         access_point: v2.Endpoints) -> list[BrokerQueues]:
    """TopicRouteProcessor.brokers for a client that reached this broker at `access_point`
    (QueryRouteRequest.endpoints), its refusal in RocketMQ 5's words."""
    reached_host = access_point.addresses[0].host if access_point.addresses else None
    try:
        return await routes.brokers(topic, reached_host)
    except TopicRouteNotFound as missing:
        raise V2Error(v2.TOPIC_NOT_FOUND, f"topic {missing.topic!r} does not exist") from None
