"""ClientInstance.acquire (MQClientManager.getOrCreateMQClientInstance): a later user of an
existing instance that asks for more frequent heartbeats gets them (the Spark membership's 5 s
beside a PushConsumer's 30 s of the same client id), and a less frequent ask changes nothing."""

from __future__ import annotations

import time

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
