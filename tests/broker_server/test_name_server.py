from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from rmq.broker_server.name_server.broker_outer_api import REGISTER_RETRY_S, BrokerOuterAPI
from rmq.broker_server.name_server.namesrv_controller import NameServerService, RouteInfoManager
from rmq.broker_server.processors.topic_config_manager import TopicConfig, TopicConfigManager
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from testing.processes import free_port
from tests.waiting import wait_until_async


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_routes_merge_brokers_and_expire_silent_ones() -> None:
    clock = Clock()
    routes = RouteInfoManager(broker_expiry_ms=120000, clock=clock)
    assert routes.register_broker("b2", "10.0.0.2:10911", [TopicConfig("T", 4, 4), TopicConfig("U", 1, 1, 4)])
    assert routes.register_broker("b1", "10.0.0.1:10911", [TopicConfig("T", 4, 4)])
    assert not routes.register_broker("b1", "10.0.0.1:10911", [TopicConfig("T", 4, 4)])
    route = routes.pick_topic_route("T")
    assert [(info.broker_name, config.read_queue_nums) for info, config in route] == [("b1", 4), ("b2", 4)]
    assert routes.pick_topic_route("missing") == []
    assert routes.topics() == [TopicConfig("T", 8, 8, 6), TopicConfig("U", 1, 1, 4)]
    clock.now += 100
    routes.register_broker("b1", "10.0.0.1:10911", [])  # b1 dropped T
    clock.now += 21  # b2 silent for 121 s
    assert [info.broker_name for info in routes.live_brokers()] == ["b1"]
    assert routes.scan_not_active_broker() == ["b2"]
    assert routes.pick_topic_route("T") == []
    assert routes.unregister_broker("b1") and routes.live_brokers() == []


def test_members_of_a_broker_name_form_one_group() -> None:
    """Master (id 0) and slave (id 1) of b1: one BrokerData listing both, the master's address and
    topics; without the master the slave answers for the group, read-only (no PERM_WRITE)."""
    clock = Clock()
    routes = RouteInfoManager(broker_expiry_ms=120000, clock=clock)
    routes.register_broker("b1", "10.0.0.1:10911", [TopicConfig("T", 4, 4)], 0, rmq_pb2.SYNC_MASTER)
    routes.register_broker("b1", "10.0.0.2:10911", [], 1, rmq_pb2.SLAVE)
    [group] = routes.broker_groups()
    data = group.to_proto()
    assert data.address == "10.0.0.1:10911"
    assert [(m.broker_id, m.address, m.role) for m in data.members] == [
        (0, "10.0.0.1:10911", rmq_pb2.SYNC_MASTER), (1, "10.0.0.2:10911", rmq_pb2.SLAVE)]
    assert [(g.broker_name, c.read_queue_nums) for g, c in routes.pick_topic_route("T")] == [("b1", 4)]
    assert routes.topics() == [TopicConfig("T", 4, 4, 6)]   # counted once per group
    routes.register_broker("b1", "10.0.0.2:10911", [TopicConfig("T", 4, 4)], 1, rmq_pb2.SLAVE)
    assert routes.unregister_broker("b1", 0)
    [(group, config)] = routes.pick_topic_route("T")
    assert (group.to_proto().address, group.has_master) == ("10.0.0.2:10911", False)


def test_in_controller_mode_the_master_of_the_newest_epoch_answers_for_the_group() -> None:
    """Id 1 elected master in epoch 2 while the old master (id 0, epoch 1) has not expired yet:
    routes name id 1, writable; id 0 back as a slave changes nothing."""
    routes = RouteInfoManager(broker_expiry_ms=120000, clock=Clock())
    routes.register_broker("b1", "10.0.0.1:10911", [TopicConfig("T", 4, 4)], 0, rmq_pb2.SYNC_MASTER, epoch=1)
    routes.register_broker("b1", "10.0.0.2:10911", [TopicConfig("T", 4, 4)], 1, rmq_pb2.SYNC_MASTER, epoch=2)
    [(group, _)] = routes.pick_topic_route("T")
    assert (group.to_proto().address, group.has_master) == ("10.0.0.2:10911", True)
    routes.register_broker("b1", "10.0.0.1:10911", [TopicConfig("T", 4, 4)], 0, rmq_pb2.SLAVE, epoch=2)
    [(group, _)] = routes.pick_topic_route("T")
    assert (group.to_proto().address, group.has_master) == ("10.0.0.2:10911", True)
    assert [(m.broker_id, m.role, m.epoch) for m in group.to_proto().members] == [
        (0, rmq_pb2.SLAVE, 2), (1, rmq_pb2.SYNC_MASTER, 2)]


def test_a_name_server_that_missed_a_registration_hears_it_again_within_seconds(tmp_path: Path) -> None:
    """A name server a broker could not reach (down, restarted, cut off: a new master's first
    registration in the chaos runs' bridge) is asked again every REGISTER_RETRY_S, not at the next
    30 s period: until it hears the broker, producers asking it see no master for the group. The
    name server that was reached is not asked again before the period."""
    reached, late = RouteInfoManager(), RouteInfoManager()
    late_address = f"127.0.0.1:{free_port()}"

    async def scenario() -> float:
        first = await serve_name_server(reached, "127.0.0.1:0")
        outer = BrokerOuterAPI([f"127.0.0.1:{first.port}", late_address], "chaos-b", "10.0.0.1:9876",
                               TopicConfigManager(tmp_path), register_interval_ms=30000)
        outer.start()
        await wait_until_async(lambda: reached.broker_groups(), "the reachable name server registered it")
        registered_at = reached.broker_groups()[0].members[0].last_update_ms
        second = await serve_name_server(late, late_address)   # comes up (or back) only now
        started = time.monotonic()
        await wait_until_async(lambda: late.broker_groups(), "the late name server registered it", timeout=20)
        waited = time.monotonic() - started
        assert reached.broker_groups()[0].members[0].last_update_ms == registered_at
        await outer.stop()
        await asyncio.gather(first.server.stop(None), second.server.stop(None))
        return waited

    assert asyncio.run(scenario()) < 3 * REGISTER_RETRY_S + 2.0   # the gRPC channel's reconnect back-off


@dataclass
class Serving:
    server: grpc.aio.Server
    port: int


async def serve_name_server(routes: RouteInfoManager, listen: str) -> Serving:
    server = grpc.aio.server()
    rmq_pb2_grpc.add_NameServerServiceServicer_to_server(NameServerService(routes), server)
    port = server.add_insecure_port(listen)
    await server.start()
    return Serving(server, port)
