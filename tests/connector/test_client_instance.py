"""ClientInstance.acquire (MQClientManager.getOrCreateMQClientInstance): a later user of an
existing instance that asks for more frequent heartbeats gets them (the Spark membership's 5 s
beside a PushConsumer's 30 s of the same client id), and a less frequent ask changes nothing."""

from __future__ import annotations

import time

from rmq.connector import Producer, PushConsumer
from rmq.connector.client import RmqClient
from rmq.connector.client_instance import HEARTBEAT_INTERVAL_S, ClientInstance
from tests.waiting import wait_until


def test_a_later_user_asking_for_shorter_heartbeats_gets_them() -> None:
    beats: list[float] = []
    with RmqClient("127.0.0.1:1") as client:
        first = ClientInstance.acquire("heartbeat-interval", client=client)
        first.heartbeat_all = lambda: beats.append(time.monotonic())   # type: ignore[method-assign]
        first.start()
        try:
            again = ClientInstance.acquire("heartbeat-interval", client=client, heartbeat_interval_s=60)
            assert again is first
            assert first._heartbeat_interval_s == HEARTBEAT_INTERVAL_S
            ClientInstance.acquire("heartbeat-interval", client=client, heartbeat_interval_s=0.05)
            assert first._heartbeat_interval_s == 0.05
            wait_until(lambda: len(beats) >= 3, what="three heartbeats at the shorter interval")
        finally:
            for _ in range(3):
                first.release()


def test_a_producer_shares_its_client_id_s_routes_and_connections() -> None:
    """RocketMQ's MQClientInstance holds the route table and the connections of every producer
    and consumer of a client id: so does ClientInstance (one RmqClient), closed by the last."""
    consumer = PushConsumer("shared-instance", "127.0.0.1:1", instance_name="shared")
    with Producer("127.0.0.1:1", instance_name="shared") as producer:
        assert producer.client is consumer.client
        with Producer("127.0.0.1:1", instance_name="other") as other:
            assert other.client is not producer.client
    assert instances_of(producer.client_id) == 1     # the consumer still uses it
    consumer.shutdown()
    assert instances_of(producer.client_id) == 0     # the last user closed it


def instances_of(client_id: str) -> int:
    return sum(1 for key in ClientInstance._instances if key[0] == client_id)
