from rmq.broker_server.name_server.namesrv_controller import RouteInfoManager
from rmq.broker_server.processors.topic_config_manager import TopicConfig
from rmq.v1 import rmq_pb2


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
