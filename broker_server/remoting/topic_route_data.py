"""TopicRouteData as 4.x clients read it (docs/remoting-protocol.md, "Route data"): JSON whose
`brokerAddrs` maps broker ids to addresses with the ids written as bare integers ({0:"host:port"}),
as the Java name server writes them; the Java and C++ clients read that form."""

from __future__ import annotations

import json
from dataclasses import dataclass

from rmq.topic_config import QueueData


@dataclass(frozen=True)
class BrokerData:
    broker_name: str
    addresses: dict[int, str]  # broker id (0: master) -> remoting HOST:PORT
    cluster_name: str          # brokerClusterName


def _broker_json(broker: BrokerData) -> str:
    addresses = ",".join(
        f"{broker_id}:{json.dumps(address)}" for broker_id, address in sorted(broker.addresses.items())
    )
    return (
        f'{{"brokerAddrs":{{{addresses}}},"brokerName":{json.dumps(broker.broker_name)},'
        f'"cluster":{json.dumps(broker.cluster_name)}}}'
    )


def _queue_json(queue: QueueData) -> str:
    return json.dumps(
        {
            "brokerName": queue.broker_name,
            "perm": queue.perm,
            "readQueueNums": queue.read_queue_nums,
            "topicSysFlag": 0,
            "writeQueueNums": queue.write_queue_nums,
        },
        separators=(",", ":"),
    )


def encode_topic_route(brokers: list[BrokerData], queues: list[QueueData]) -> bytes:
    return (
        f'{{"brokerDatas":[{",".join(map(_broker_json, brokers))}],"filterServerTable":{{}},'
        f'"queueDatas":[{",".join(map(_queue_json, queues))}]}}'
    ).encode()
