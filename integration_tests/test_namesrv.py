"""`rmq namesrv` with two real brokers: registration, merged routes (4 + 4 queues -> 8
MessageQueues), unregistration on a clean stop and expiry of a broker that died."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmq.v1 import rmq_pb2
from testing import processes
from tests.rmq_stubs import Stubs
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def wait_for(condition, what: str, timeout: float = 10.0) -> None:
    wait_until(condition, what, timeout, interval=0.05)


def broker_names(namesrv: Stubs) -> list[str]:
    return [b.broker_name for b in namesrv.route.ListBrokers(rmq_pb2.ListBrokersRequest()).brokers]


def test_two_brokers_behind_a_name_server(tmp_path: Path) -> None:
    namesrv_config = tmp_path / "namesrv.yaml"
    namesrv_config.write_text("broker_expiry_ms: 1500\nbroker_scan_interval_ms: 200\n")
    broker_config = tmp_path / "broker.yaml"
    broker_config.write_text("register_broker_interval_ms: 300\n")
    namesrv = processes.namesrv(tmp_path, extra=["--config", str(namesrv_config)]).start()
    brokers = [
        processes.broker(
            tmp_path, name=name, namesrv_address=namesrv.address, extra=["--config", str(broker_config)]
        ).start()
        for name in ("broker-b", "broker-a")
    ]
    routes = Stubs.connect(namesrv.address)
    try:
        wait_for(lambda: broker_names(routes) == ["broker-a", "broker-b"], "both brokers registered")
        for broker in brokers:
            with_stubs(broker.address, lambda rmq: rmq.create_topic("spread", queues=4))
        wait_for(
            lambda: len(routes.route.QueryRoute(rmq_pb2.QueryRouteRequest(topic="spread")).queue_datas) == 2,
            "the topic routed on both brokers",
        )

        route = routes.route.QueryRoute(rmq_pb2.QueryRouteRequest(topic="spread"))
        assert route.status.code == rmq_pb2.OK
        addresses = {b.broker_name: b.address for b in route.brokers}
        assert addresses == {"broker-a": brokers[1].address, "broker-b": brokers[0].address}
        queues = sorted(
            (q.broker_name, queue_id) for q in route.queue_datas for queue_id in range(q.read_queue_nums)
        )
        assert len(queues) == 8 and queues[0] == ("broker-a", 0) and queues[-1] == ("broker-b", 3)
        topics = routes.route.ListTopics(rmq_pb2.ListTopicsRequest()).topics
        assert [(t.topic_name, t.read_queue_nums) for t in topics] == [("spread", 8)]
        missing = routes.route.QueryRoute(rmq_pb2.QueryRouteRequest(topic="nowhere"))
        assert (
            missing.status.code == rmq_pb2.TOPIC_NOT_EXIST
            and "no live broker holds it" in missing.status.message
        )

        assert brokers[0].stop() == 0  # clean stop: unregistered at once
        assert broker_names(routes) == ["broker-a"]
        brokers[1].kill()  # died: dropped after the 1.5 s expiry
        wait_for(lambda: broker_names(routes) == [], "the killed broker dropped")
        wait_for(lambda: "broker-a removed after 1500 ms without a heartbeat" in namesrv.log(),
                 "the name server's log line")
    finally:
        routes.close()
        for broker in brokers:
            broker.stop()
        assert namesrv.stop() == 0


def with_stubs(address: str, action) -> None:
    stubs = Stubs.connect(address)
    try:
        assert action(stubs).code == rmq_pb2.OK
    finally:
        stubs.close()


def test_broker_registers_when_the_name_server_comes_late(tmp_path: Path) -> None:
    namesrv = processes.namesrv(tmp_path)
    config = tmp_path / "broker.json"
    config.write_text(json.dumps({"register_broker_interval_ms": 300}))
    broker = processes.broker(
        tmp_path, namesrv_address=namesrv.address, extra=["--config", str(config)]
    ).start()
    try:
        namesrv.start()
        routes = Stubs.connect(namesrv.address)
        wait_for(lambda: broker_names(routes) == ["broker-a"], "the broker registered")
        routes.close()
    finally:
        broker.stop()
        namesrv.stop()
    assert "RegisterBroker with name server" in broker.log()  # the failed attempts were logged
