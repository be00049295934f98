"""The controller's state and election (ReplicasInfoManager, docs/controller.md,
docs/controller.md), driven by an injected clock: role assignment, failover to the in-sync
member with the highest CommitLog end, the epoch and where each epoch starts, persistence
across a controller restart, and the members it refuses."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import grpc
import pytest

from rmq.broker_server.broker_controller import BrokerController, open_store
from rmq.broker_server.config import BrokerConfig, NameServerConfig, load_config
from rmq.broker_server.errors import BrokerError, UserError
from rmq.broker_server.name_server.namesrv_controller import controller_auth
from rmq.broker_server.replication.controller_manager import ControllerCollector, ControllerService
from rmq.broker_server.replication.replicas_info_manager import (
    KEEP_EVERYTHING,
    ControllerLimits,
    Heartbeat,
    JsonGroupStore,
    ReplicasInfoManager,
)
from rmq.broker_server.replication.replicas_manager import (
    RETRY_S,
    ReplicasManager,
    RoleAssignment,
    serve_in_controller_mode,
)
from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.connector.client import OutgoingMessage, RmqClient, TopicRoute
from rmq.connector.errors import RmqError
from rmq.store import PutMessageStatus
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from tests.acl_files import write_acl
from tests.broker_server.in_process_broker import InProcessBroker
from tests.broker_server.test_acl import ACL_YAML
from tests.broker_server.test_replication import write_secret
from tests.rmq_stubs import decode, suspend_fields
from tests.store.conftest import message
from tests.waiting import wait_until

CLUSTER = "DefaultCluster"
TIMEOUT_MS = 3000
A, B, C = "127.0.0.1:1000", "127.0.0.1:1001", "127.0.0.1:1002"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def manager(tmp_path: Path, clock: Clock, **limits: int) -> ReplicasInfoManager:
    replicas = ReplicasInfoManager(CLUSTER, JsonGroupStore(tmp_path), TIMEOUT_MS, ControllerLimits(**limits),
                                   clock)
    replicas.load()
    return replicas


def beat(replicas: ReplicasInfoManager, broker_id: int, address: str, epoch: int = 0, max_offset: int = -1,
         in_sync: tuple[str, ...] = (), name: str = "g", cluster: str = CLUSTER
         ) -> rmq_pb2.ControllerHeartbeatResponse:
    return replicas.heartbeat(cluster, Heartbeat(name, broker_id, address, epoch, max_offset, in_sync))


def group_of_three(replicas: ReplicasInfoManager) -> None:
    """Id 0 master of epoch 1 (started at 0), ids 1 and 2 slaves, id 1 and 2 in sync."""
    assert beat(replicas, 0, A).master_broker_id == 0
    beat(replicas, 0, A, epoch=1, max_offset=0)
    beat(replicas, 1, B)
    beat(replicas, 2, C)
    beat(replicas, 0, A, epoch=1, max_offset=0, in_sync=(B, C))


def test_the_first_member_is_master_of_epoch_1_and_the_next_ones_slaves(tmp_path: Path, clock: Clock) -> None:
    replicas = manager(tmp_path, clock)
    first = beat(replicas, 1, B)
    assert (first.epoch, first.master_broker_id, first.master_address) == (1, 1, B)
    second = beat(replicas, 0, A)
    assert (second.epoch, second.master_broker_id, second.master_address, second.truncate_to) == (
        1, 1, B, KEEP_EVERYTHING)   # new to the group: the master checks its CommitLog as a slave's
    assert beat(replicas, 1, B, epoch=1, max_offset=500, in_sync=(A,)).in_sync_ids == [0, 1]


def test_a_silent_master_is_replaced_by_the_in_sync_member_with_the_highest_offset(
        tmp_path: Path, clock: Clock) -> None:
    replicas = manager(tmp_path, clock)
    group_of_three(replicas)
    clock.now += 2
    beat(replicas, 1, B, epoch=1, max_offset=900)
    beat(replicas, 2, C, epoch=1, max_offset=1000)
    replicas.scan()
    assert beat(replicas, 1, B, epoch=1, max_offset=900).master_broker_id == 0   # within the timeout
    clock.now += 1.5
    replicas.scan()
    answer = beat(replicas, 2, C, epoch=1, max_offset=1000)
    assert (answer.epoch, answer.master_broker_id, answer.master_address) == (2, 2, C)
    assert answer.in_sync_ids == [2]


def test_only_a_live_in_sync_member_is_elected(tmp_path: Path, clock: Clock) -> None:
    replicas = manager(tmp_path, clock)
    group_of_three(replicas)
    beat(replicas, 0, A, epoch=1, max_offset=800, in_sync=(B,))   # id 2 fell behind
    clock.now += 4
    beat(replicas, 2, C, epoch=1, max_offset=5000)
    replicas.scan()
    assert replicas.groups["g"].master_id == 0   # id 1 is silent too: no one is elected
    beat(replicas, 1, B, epoch=1, max_offset=800)
    replicas.scan()
    assert (replicas.groups["g"].master_id, replicas.groups["g"].epoch) == (1, 2)


def test_a_returning_master_drops_what_the_new_master_never_held(tmp_path: Path, clock: Clock) -> None:
    replicas = manager(tmp_path, clock)
    group_of_three(replicas)
    clock.now += 4
    beat(replicas, 1, B, epoch=1, max_offset=900)
    replicas.scan()
    with pytest.raises(BrokerError) as refused:    # the new master has not confirmed its start yet
        beat(replicas, 0, A, epoch=1)
    assert refused.value.code == rmq_pb2.SERVICE_NOT_AVAILABLE
    assert beat(replicas, 1, B, epoch=2, max_offset=900).truncate_to == KEEP_EVERYTHING
    answer = beat(replicas, 0, A, epoch=1)
    assert (answer.epoch, answer.master_broker_id, answer.truncate_to) == (2, 1, 900)
    assert beat(replicas, 0, A, epoch=2, max_offset=900).truncate_to == KEEP_EVERYTHING


def test_the_state_survives_a_controller_restart_and_gives_every_member_a_full_timeout(
        tmp_path: Path, clock: Clock) -> None:
    replicas = manager(tmp_path, clock)
    group_of_three(replicas)
    clock.now += 4
    beat(replicas, 1, B, epoch=1, max_offset=900)
    replicas.scan()
    beat(replicas, 1, B, epoch=2, max_offset=900, in_sync=(C,))
    clock.now += 10
    restarted = manager(tmp_path, clock)
    restarted.scan()
    answer = beat(restarted, 2, C, epoch=2)
    assert (answer.epoch, answer.master_broker_id, answer.in_sync_ids) == (2, 1, [1, 2])
    assert beat(restarted, 0, A, epoch=1).truncate_to == 900


def test_a_master_back_without_its_store_is_replaced_by_a_live_in_sync_member(
        tmp_path: Path, clock: Clock) -> None:
    replicas = manager(tmp_path, clock)
    group_of_three(replicas)
    beat(replicas, 1, B, epoch=1, max_offset=900)
    answer = beat(replicas, 0, A, epoch=0)
    assert (answer.epoch, answer.master_broker_id) == (2, 1)


@pytest.mark.parametrize("case, expected", [
    ("same id", "id 1 is already a live member at 127.0.0.1:1001; 127.0.0.1:1002 needs its own --broker-id"),
    ("other cluster", "belongs to cluster 'other' but this controller manages cluster 'DefaultCluster'"),
    ("newer epoch", "was in master epoch 7, newer than this controller's 1"),
    ("negative id", "a broker id of 0 or more"),
])
def test_a_member_that_must_not_join_is_refused_with_the_reason(
        tmp_path: Path, clock: Clock, case: str, expected: str) -> None:
    replicas = manager(tmp_path, clock)
    group_of_three(replicas)
    with pytest.raises(BrokerError) as refused:
        {"same id": lambda: beat(replicas, 1, C),
         "other cluster": lambda: beat(replicas, 3, "127.0.0.1:1003", cluster="other"),
         "newer epoch": lambda: beat(replicas, 1, B, epoch=7),
         "negative id": lambda: beat(replicas, -1, "127.0.0.1:1003")}[case]()
    assert refused.value.code == rmq_pb2.ILLEGAL_ARGUMENT
    assert expected in refused.value.message
    assert beat(replicas, 1, B, epoch=1).master_address == A   # nothing of it was kept


def test_a_member_id_whose_holder_is_gone_may_move_to_another_address(tmp_path: Path, clock: Clock) -> None:
    replicas = manager(tmp_path, clock)
    group_of_three(replicas)
    clock.now += 4
    beat(replicas, 0, A, epoch=1, max_offset=0)
    beat(replicas, 1, "127.0.0.1:2001", epoch=1)
    assert beat(replicas, 0, A, epoch=1, max_offset=0, in_sync=("127.0.0.1:2001",)).in_sync_ids == [0, 1]


def test_groups_and_members_are_bounded(tmp_path: Path, clock: Clock) -> None:
    replicas = manager(tmp_path, clock, max_groups=1, max_members_per_group=2)
    beat(replicas, 0, A)
    beat(replicas, 0, A, epoch=1, max_offset=0)
    beat(replicas, 1, B)
    for refused_call, setting in ((lambda: beat(replicas, 2, C), "2 members"),
                                  (lambda: beat(replicas, 0, C, name="h"), "at most 1 broker groups")):
        with pytest.raises(BrokerError) as refused:
            refused_call()
        assert refused.value.code == rmq_pb2.LIMIT_EXCEEDED and setting in refused.value.message
    assert set(replicas.groups) == {"g"} and set(replicas.groups["g"].members) == {0, 1}


def test_a_controller_mode_broker_with_acl_needs_the_cluster_secret(tmp_path: Path) -> None:
    """Any term may make a member a slave, and a slave of an ACL cluster authenticates its master."""
    security = ServerSecurity(AclFile(write_acl(tmp_path / "acl.yml", ACL_YAML)))
    config = BrokerConfig(controller="127.0.0.1:1", store_dir=str(tmp_path / "store"))
    with pytest.raises(UserError, match="needs --cluster-secret FILE"):
        asyncio.run(serve_in_controller_mode(config, security))


def route_queries(client: RmqClient) -> list[str]:
    """The topics `client` asks the name servers for a route from now on."""
    asked: list[str] = []
    query_route = client.query_route

    def spied_query_route(topic: str) -> TopicRoute:
        asked.append(topic)
        return query_route(topic)

    client.query_route = spied_query_route  # type: ignore[method-assign]
    return asked


def test_a_master_told_of_a_newer_epoch_refuses_sends_before_its_term_ends(tmp_path: Path) -> None:
    """Fencing: the heartbeat answer names id 1 master of epoch 2; the master of epoch 1 refuses
    every send from then on (its term then ends and it restarts as a slave), and a client whose
    send it refused asks the name servers for the route again."""
    broker = InProcessBroker(tmp_path / "broker", controller="127.0.0.1:1",
                             controller_heartbeat_interval_ms=10).start()

    async def open_manager() -> ReplicasManager:   # its channel belongs to the broker's loop
        return ReplicasManager(broker.config, ServerSecurity())

    manager = broker.run(open_manager())

    async def newer_epoch(*_: object) -> rmq_pb2.ControllerHeartbeatResponse:
        return rmq_pb2.ControllerHeartbeatResponse(status=rmq_pb2.Status(code=rmq_pb2.OK), epoch=2,
                                                   master_broker_id=1, master_address=B)

    manager.heartbeat = newer_epoch  # type: ignore[method-assign]
    try:
        with RmqClient(broker.address) as client:
            client.create_topic("T", queues=1)
            client.send("T", [OutgoingMessage(b"before")])
            term = RoleAssignment(epoch=1, master_id=0, master_address=broker.address, truncate_to=-1,
                                  in_sync_ids=(0,))
            broker.run(manager.heartbeat_until_moved(broker.controller, term))
            asked = route_queries(client)
            for _ in range(2):
                with pytest.raises(RmqError) as refused:
                    client.send("T", [OutgoingMessage(b"after")])
                assert refused.value.code == rmq_pb2.SERVICE_NOT_AVAILABLE
        assert asked == ["T"]   # the refusal dropped the cached route: the client follows a new master
    finally:
        broker.run(manager.close())
        broker.stop()


def test_the_name_server_metrics_show_each_groups_master_epoch_and_in_sync_set(
        tmp_path: Path, clock: Clock) -> None:
    replicas = manager(tmp_path, clock)
    group_of_three(replicas)
    samples = {(sample.name, sample.labels["broker"]): sample.value
               for family in ControllerCollector(replicas).collect() for sample in family.samples}
    assert samples == {("rmq_controller_master_id", "g"): 0, ("rmq_controller_master_epoch", "g"): 1,
                       ("rmq_controller_in_sync_members", "g"): 3}


def test_a_store_of_another_member_is_refused_before_it_joins(tmp_path: Path) -> None:
    """The epoch file names its member: another member's store (or another cluster's) is not
    taken for this one's."""
    async def epochs() -> tuple[int, int]:
        first = ReplicasManager(BrokerConfig(controller=A, store_dir=str(tmp_path), broker_id=1),
                                ServerSecurity())
        fresh = first.local_epoch()
        first.save_epoch(3)
        try:
            return fresh, first.local_epoch()
        finally:
            await first.close()

    assert asyncio.run(epochs()) == (0, 3)

    async def as_another(**settings: str | int) -> None:
        config = BrokerConfig(controller=A, store_dir=str(tmp_path), **settings)  # type: ignore[arg-type]
        other = ReplicasManager(config, ServerSecurity())
        try:
            other.local_epoch()
        finally:
            await other.close()

    with pytest.raises(UserError, match="this store belongs to broker broker-a id 1 of cluster "
                                        "'DefaultCluster', not to broker broker-a id 2"):
        asyncio.run(as_another(broker_id=2))
    with pytest.raises(UserError, match="not to broker broker-a id 1 of cluster 'other'"):
        asyncio.run(as_another(broker_id=1, cluster_name="other"))


@pytest.mark.parametrize("settings, reason", [
    ({"broker_role": "SLAVE"}, "--role names the master's mode"),
    ({"master": "127.0.0.1:10911"}, "--master is not given"),
    ({"controller": "nowhere"}, "controller must be HOST:PORT"),
])
def test_controller_mode_settings_that_contradict_it_are_refused(settings: dict, reason: str) -> None:
    with pytest.raises(UserError, match=reason):
        load_config(BrokerConfig, None, {"controller": "127.0.0.1:9876", "broker_id": 3, **settings})
    assert load_config(BrokerConfig, None, {"controller": "127.0.0.1:9876", "broker_id": 3}).broker_id == 3


@pytest.mark.parametrize("settings, reason", [
    ({"min_in_sync_replicas": 0}, "min_in_sync_replicas must be positive, not 0"),
    ({"min_in_sync_replicas": 1, "controller": ""}, "min_in_sync_replicas 1 needs --controller"),
    ({"ha_max_time_not_caught_up_ms": 0}, "ha_max_time_not_caught_up_ms must be positive, not 0"),
])
def test_in_sync_settings_are_checked_at_start(settings: dict, reason: str, tmp_path: Path) -> None:
    """min_in_sync_replicas at least 1, and 1 only in controller mode (nothing else tells a
    SYNC_MASTER that it may acknowledge alone); the not-caught-up time positive. Valid ones reach
    the store's HAService."""
    with pytest.raises(UserError, match=reason):
        load_config(BrokerConfig, None, {"controller": "127.0.0.1:9876", **settings})
    config = load_config(BrokerConfig, None, {"controller": "127.0.0.1:9876", "min_in_sync_replicas": 1,
                                              "ha_max_time_not_caught_up_ms": 5000,
                                              "store_dir": str(tmp_path)})
    store = open_store(config)
    try:
        assert (store.ha_service.min_in_sync_replicas, store.ha_service.max_time_not_caught_up_s) == (1, 5.0)
    finally:
        store.shutdown()
    assert BrokerConfig().min_in_sync_replicas == 2   # acknowledged means on a slave too


def test_a_member_asks_again_until_the_controller_assigns_it_a_role(tmp_path: Path) -> None:
    """Not yet (the new master has not confirmed its epoch: after NOT_CONFIRMED_RETRY_S) and a
    controller error (after RETRY_S) are asked again; a refusal ends the broker with the reason."""
    answers = [rmq_pb2.ControllerHeartbeatResponse(status=rmq_pb2.Status(code=code, message="later"))
               for code in (rmq_pb2.SERVICE_NOT_AVAILABLE, rmq_pb2.SYSTEM_ERROR)]
    answers.append(rmq_pb2.ControllerHeartbeatResponse(status=rmq_pb2.Status(code=rmq_pb2.OK), epoch=2,
                                                       master_broker_id=1, master_address=B, truncate_to=-1))
    answers.append(rmq_pb2.ControllerHeartbeatResponse(status=rmq_pb2.Status(
        code=rmq_pb2.ILLEGAL_ARGUMENT, message="id 0 is already a live member")))

    async def register_twice() -> RoleAssignment | None:
        manager = ReplicasManager(BrokerConfig(controller=A, store_dir=str(tmp_path)), ServerSecurity())

        async def next_answer(*_: object) -> rmq_pb2.ControllerHeartbeatResponse:
            return answers.pop(0)

        manager.heartbeat = next_answer  # type: ignore[method-assign]
        terminated = asyncio.get_running_loop().create_future()
        try:
            assignment = await manager.register(terminated)
            with pytest.raises(UserError, match="refuses this broker: id 0 is already a live member"):
                await manager.register(terminated)
            return assignment
        finally:
            await manager.close()

    assert asyncio.run(register_twice()) == RoleAssignment(2, 1, B, KEEP_EVERYTHING, ())


def test_a_member_waiting_for_a_new_master_to_confirm_asks_again_within_a_fifth_of_a_second(
        tmp_path: Path) -> None:
    """After a failover every slave is told "the new master has not confirmed yet" until that
    master's first heartbeat: it asks again NOT_CONFIRMED_RETRY_S later, not RETRY_S (the group
    takes no SYNC_MASTER write until a slave follows the new master)."""
    answers = [rmq_pb2.ControllerHeartbeatResponse(status=rmq_pb2.Status(
        code=rmq_pb2.SERVICE_NOT_AVAILABLE, message="the master of epoch 2 has not confirmed")),
        rmq_pb2.ControllerHeartbeatResponse(status=rmq_pb2.Status(code=rmq_pb2.OK), epoch=2,
                                            master_broker_id=1, master_address=B, truncate_to=-1)]

    async def register() -> float:
        manager = ReplicasManager(BrokerConfig(controller=A, store_dir=str(tmp_path)), ServerSecurity())

        async def next_answer(*_: object) -> rmq_pb2.ControllerHeartbeatResponse:
            return answers.pop(0)

        manager.heartbeat = next_answer  # type: ignore[method-assign]
        began = time.monotonic()
        try:
            assert await manager.register(asyncio.get_running_loop().create_future()) is not None
            return time.monotonic() - began
        finally:
            await manager.close()

    assert asyncio.run(register()) < RETRY_S / 2


def test_an_older_epoch_claim_from_the_master_is_refused_and_elects_no_one(tmp_path: Path,
                                                                         clock: Clock) -> None:
    """Issue 39's attack began so: a heartbeat as the master claiming an older epoch made the
    controller replace the master. A confirmed master never goes back: refused, nothing changes."""
    replicas = manager(tmp_path, clock)
    group_of_three(replicas)
    clock.now += 4
    beat(replicas, 1, B, epoch=1, max_offset=900)
    beat(replicas, 2, C, epoch=1, max_offset=900)
    replicas.scan()
    beat(replicas, 1, B, epoch=2, max_offset=900)   # id 1 master of epoch 2, confirmed
    with pytest.raises(BrokerError) as refused:
        beat(replicas, 1, B, epoch=1, max_offset=900)
    assert refused.value.code == rmq_pb2.ILLEGAL_ARGUMENT
    assert "cannot go back to epoch 1" in refused.value.message
    group = replicas.groups["g"]
    assert (group.epoch, group.master_id) == (2, 1)


def fake_member_elected(replicas: ReplicasInfoManager, clock: Clock) -> None:
    """Issue 39's attack without a cluster secret: a fake member id 2 at C (nothing listens) named in
    sync with a huge CommitLog end, the real slave id 1 having replicated 900; the master goes
    silent and the fake is elected master of epoch 2."""
    group_of_three(replicas)
    beat(replicas, 1, B, epoch=1, max_offset=900)
    beat(replicas, 2, C, epoch=1, max_offset=10**12)
    clock.now += 4
    beat(replicas, 1, B, epoch=1, max_offset=900)
    beat(replicas, 2, C, epoch=1, max_offset=10**12)
    replicas.scan()
    assert (replicas.groups["g"].epoch, replicas.groups["g"].master_id) == (2, 2)


def test_a_confirmation_below_what_the_member_was_elected_with_is_refused(tmp_path: Path,
                                                                        clock: Clock) -> None:
    """The fake confirms epoch 2 at CommitLog end 0: refused (it never held what it was elected
    for), the controller elects the real slave, and the old master is cut where that one starts,
    not at 0."""
    replicas = manager(tmp_path, clock)
    fake_member_elected(replicas, clock)
    with pytest.raises(BrokerError) as refused:
        beat(replicas, 2, C, epoch=2, max_offset=0)
    assert refused.value.code == rmq_pb2.ILLEGAL_ARGUMENT
    assert "does not hold what it was elected for" in refused.value.message
    group = replicas.groups["g"]
    assert (group.epoch, group.master_id, 2 in group.epoch_starts) == (3, 1, False)
    beat(replicas, 1, B, epoch=1, max_offset=900)
    beat(replicas, 1, B, epoch=3, max_offset=900)   # confirms epoch 3 at 900
    assert beat(replicas, 0, A, epoch=1).truncate_to == 900   # epoch 2, never confirmed, was abandoned
    assert manager(tmp_path, clock).groups["g"].epoch_starts == {1: 0, 3: 900}


def test_no_member_is_cut_below_what_an_in_sync_slave_held(tmp_path: Path, clock: Clock) -> None:
    """Id 1 (in sync) reported holding 900 in epoch 1; it and the master die, id 2 (in sync at
    500) is elected and starts epoch 2 at 500. Cutting the old master at 500 would erase what id 1
    held (acknowledged under SYNC_MASTER): it is kept, and told why."""
    replicas = manager(tmp_path, clock)
    group_of_three(replicas)
    beat(replicas, 1, B, epoch=1, max_offset=900)
    beat(replicas, 2, C, epoch=1, max_offset=500)
    clock.now += 4
    beat(replicas, 2, C, epoch=1, max_offset=500)
    replicas.scan()
    beat(replicas, 2, C, epoch=2, max_offset=500)
    with pytest.raises(BrokerError) as kept:
        beat(replicas, 0, A, epoch=1)
    assert kept.value.code == rmq_pb2.SERVICE_NOT_AVAILABLE
    assert "would drop what an in-sync slave held up to 900 in epoch 1" in kept.value.message
    assert manager(tmp_path, clock).groups["g"].replicated == {1: {1: 900, 2: 500}}   # persisted


def test_with_three_epochs_a_returning_first_master_is_cut_where_the_second_epoch_starts(
        tmp_path: Path, clock: Clock) -> None:
    """Two failovers (epoch 2 starts at 900, epoch 3 at 1500), then the master of epoch 1 returns:
    it holds nothing of epochs 2 and 3, and its bytes past 900 were never acknowledged. Cut at 900,
    not at the current epoch's 1500 (with two epochs the two are the same)."""
    replicas = manager(tmp_path, clock)
    group_of_three(replicas)
    beat(replicas, 1, B, epoch=1, max_offset=900)
    beat(replicas, 2, C, epoch=1, max_offset=900)
    clock.now += 4
    beat(replicas, 1, B, epoch=1, max_offset=900)
    beat(replicas, 2, C, epoch=1, max_offset=800)
    replicas.scan()
    beat(replicas, 1, B, epoch=2, max_offset=900, in_sync=(C,))
    beat(replicas, 2, C, epoch=1, max_offset=800)
    beat(replicas, 2, C, epoch=2, max_offset=1500)
    clock.now += 4
    beat(replicas, 2, C, epoch=2, max_offset=1500)
    replicas.scan()
    beat(replicas, 2, C, epoch=3, max_offset=1500)
    assert replicas.groups["g"].epoch_starts == {1: 0, 2: 900, 3: 1500}
    answer = beat(replicas, 0, A, epoch=1)
    assert (answer.epoch, answer.master_broker_id, answer.truncate_to) == (3, 2, 900)
    assert beat(replicas, 1, B, epoch=2).truncate_to == 1500


def test_a_controller_with_acl_needs_the_cluster_secret(tmp_path: Path) -> None:
    security = ServerSecurity(AclFile(write_acl(tmp_path / "acl.yml", ACL_YAML)))
    with pytest.raises(UserError, match="--acl and --controller needs --cluster-secret FILE"):
        controller_auth(NameServerConfig(controller=True), security)


def test_the_controller_listens_only_to_heartbeats_proven_with_the_cluster_secret(
        tmp_path: Path, clock: Clock) -> None:
    """Over gRPC, broker side and controller side as they run: a broker holding the cluster secret
    becomes master; one without it (the registration account alone, issue 39) or with another
    secret is refused NO_PERMISSION and the controller keeps nothing of what it said."""
    secret = write_secret(tmp_path / "secret")
    replicas = manager(tmp_path, clock)

    async def scenario() -> list[tuple[int, int]]:
        server = grpc.aio.server()
        service = ControllerService(replicas, controller_auth(
            NameServerConfig(controller=True, cluster_secret_file=secret), ServerSecurity()))
        rmq_pb2_grpc.add_ControllerServiceServicer_to_server(service, server)
        address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        await server.start()
        answers = []
        try:
            other = write_secret(tmp_path / "other", "another secret, 32 chars!!!")
            for broker_id, member_secret in ((0, secret), (2, None), (2, other)):
                config = BrokerConfig(controller=address, store_dir=str(tmp_path / "s"), broker_name="g",
                                      broker_id=broker_id, cluster_secret_file=member_secret or "")
                member = ReplicasManager(config, ServerSecurity())
                try:
                    answer = await member.heartbeat(0, 10**12, [])
                finally:
                    await member.close()
                answers.append((answer.status.code, answer.master_broker_id))
        finally:
            await server.stop(None)
        return answers

    refused = (rmq_pb2.NO_PERMISSION, 0)
    assert asyncio.run(scenario()) == [(rmq_pb2.OK, 0), refused, refused]
    assert set(replicas.groups["g"].members) == {0}


def test_a_member_told_to_truncate_drops_its_commit_log_from_there_before_it_confirms(tmp_path: Path) -> None:
    """The term's store opens cut at `truncate_to`: the confirmation reports exactly that end (a
    broker ignoring the controller's cut would keep the old master's unacknowledged bytes and be
    refused as diverged by the new master)."""
    store = tmp_path / "store"
    old_master = InProcessBroker(store).start()
    try:
        with RmqClient(old_master.address) as client:
            client.create_topic("T", queues=1)
            client.send("T", [OutgoingMessage(b"acknowledged")] * 5)
            cut = old_master.controller.store.get_commit_log_max_offset()
            client.send("T", [OutgoingMessage(b"never acknowledged")] * 5)
        assert old_master.controller.store.get_commit_log_max_offset() > cut
    finally:
        old_master.stop()
    confirmed: list[int] = []

    async def one_term() -> None:
        member = ReplicasManager(BrokerConfig(controller=A, store_dir=str(store), listen=C), ServerSecurity())

        async def answer(epoch: int, max_offset: int, in_sync: list[str]
                         ) -> rmq_pb2.ControllerHeartbeatResponse:
            if max_offset >= 0:
                confirmed.append(max_offset)   # the term's first heartbeat, once its store is open
            return rmq_pb2.ControllerHeartbeatResponse(   # master id 1 of epoch 2; 3 once confirmed
                status=rmq_pb2.Status(code=rmq_pb2.OK), epoch=3 if confirmed else 2, master_broker_id=1,
                master_address=B, truncate_to=cut)

        member.heartbeat = answer  # type: ignore[method-assign]
        try:
            await member.serve_term(asyncio.get_running_loop().create_future())
        finally:
            await member.close()

    asyncio.run(one_term())
    assert confirmed == [cut]


def test_a_term_whose_confirmation_is_refused_is_never_served(tmp_path: Path) -> None:
    """The controller refuses a new master's confirmation (below what it was elected with): the
    term ends unserved and the member asks again, it does not take sends as master meanwhile."""
    async def one_term() -> BrokerController | None:
        member = ReplicasManager(BrokerConfig(controller=A, store_dir=str(tmp_path)), ServerSecurity())

        async def answer(epoch: int, max_offset: int, in_sync: list[str]
                         ) -> rmq_pb2.ControllerHeartbeatResponse:
            if max_offset >= 0:
                return rmq_pb2.ControllerHeartbeatResponse(status=rmq_pb2.Status(
                    code=rmq_pb2.ILLEGAL_ARGUMENT, message="does not hold what it was elected for"))
            return rmq_pb2.ControllerHeartbeatResponse(status=rmq_pb2.Status(code=rmq_pb2.OK), epoch=2,
                                                       master_broker_id=0, master_address=A, truncate_to=-1)

        member.heartbeat = answer  # type: ignore[method-assign]
        terminated = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(member.serve_term(terminated), 20)
            return member.collector.broker
        finally:
            terminated.cancel()
            await member.close()

    assert asyncio.run(one_term()) is None


def test_a_send_answered_stored_on_the_master_only_makes_the_next_send_ask_for_the_route(
        tmp_path: Path) -> None:
    """A master answering SLAVE_NOT_AVAILABLE (no slave, or its controller lease lapsed) may have
    been replaced: the client asks the name servers again before its next send."""
    broker = InProcessBroker(tmp_path / "broker", broker_role="SYNC_MASTER").start()
    try:
        with RmqClient(broker.address) as client:
            client.create_topic("T", queues=1)
            asked = route_queries(client)
            for _ in range(2):
                assert client.send("T", [OutgoingMessage(b"a"), OutgoingMessage(b"b")]).status.name == \
                    "SLAVE_NOT_AVAILABLE"
        assert asked == ["T", "T"]
    finally:
        broker.stop()


def test_a_master_renews_its_lease_with_each_heartbeat_the_controller_confirms(tmp_path: Path) -> None:
    """A SYNC_MASTER whose lease lapsed answers a put its slave holds SLAVE_NOT_AVAILABLE; the next
    heartbeat answered in the same term renews it, and puts are OK again."""
    broker = InProcessBroker(tmp_path / "broker", controller="127.0.0.1:1", broker_role="SYNC_MASTER",
                             controller_master_lease_ms=60_000).start()

    async def open_manager() -> ReplicasManager:
        return ReplicasManager(broker.config, ServerSecurity())

    manager = broker.run(open_manager())

    async def same_term(*_: object) -> rmq_pb2.ControllerHeartbeatResponse:
        return rmq_pb2.ControllerHeartbeatResponse(status=rmq_pb2.Status(code=rmq_pb2.OK), epoch=1,
                                                   master_broker_id=0, master_address=broker.address)

    manager.heartbeat = same_term  # type: ignore[method-assign]
    store = broker.controller.store
    try:
        slave = store.ha_service.connect_slave("127.0.0.1:2", store.get_commit_log_max_offset())
        store.ha_service.slave_acked(slave, 1 << 40)   # the slave holds whatever comes
        store.renew_lease(time.monotonic() - 1)
        assert store.put_message(message()).status is PutMessageStatus.SLAVE_NOT_AVAILABLE
        term = RoleAssignment(epoch=1, master_id=0, master_address=broker.address, truncate_to=-1,
                              in_sync_ids=(0,))
        assert broker.run(manager._beat(broker.controller, term))
        assert store.put_message(message()).status is PutMessageStatus.PUT_OK
    finally:
        broker.run(manager.close())
        broker.stop()


def test_a_held_pull_on_a_controller_mode_sync_master_wakes_when_its_slave_confirms(tmp_path: Path) -> None:
    """Issue 47: a send the master holds alone (its slave did not acknowledge it: a deposed or cut
    off master's) is not served, not even to a pull held for it; the slave's acknowledgement (the
    SyncStateSet's confirm offset moving) makes it readable and answers the held pull, without a
    second send and long before the hold table's periodic check."""
    broker = InProcessBroker(tmp_path / "broker", controller="127.0.0.1:1", broker_role="SYNC_MASTER",
                             store={"sync_flush_timeout_ms": 300}, hold_check_interval_ms=60_000).start()

    async def open_manager() -> ReplicasManager:
        return ReplicasManager(broker.config, ServerSecurity())

    manager = broker.run(open_manager())

    async def same_term(*_: object) -> rmq_pb2.ControllerHeartbeatResponse:
        return rmq_pb2.ControllerHeartbeatResponse(status=rmq_pb2.Status(code=rmq_pb2.OK), epoch=1,
                                                   master_broker_id=0, master_address=broker.address,
                                                   in_sync_ids=[0, 1])

    manager.heartbeat = same_term  # type: ignore[method-assign]
    store = broker.controller.store
    try:
        with grpc.insecure_channel(broker.address) as channel:
            config = rmq_pb2.TopicConfig(topic_name="T", read_queue_nums=1, write_queue_nums=1, perm=6)
            assert rmq_pb2_grpc.AdminServiceStub(channel).CreateTopic(
                rmq_pb2.CreateTopicRequest(config=config), timeout=10).status.code == rmq_pb2.OK
            slave = store.ha_service.connect_slave("127.0.0.1:2", store.get_commit_log_max_offset())
            term = RoleAssignment(epoch=1, master_id=0, master_address=broker.address, truncate_to=-1,
                                  in_sync_ids=(0, 1))
            assert broker.run(manager._beat(broker.controller, term))   # the SyncStateSet: this slave
            pull = rmq_pb2_grpc.MessagingServiceStub(channel).PullMessage.future(rmq_pb2.PullMessageRequest(
                consumer_group="g", topic="T", queue_id=0, queue_offset=0, max_messages=32,
                **suspend_fields(60_000)), timeout=90)
            hold = broker.controller.hold_service
            wait_until(lambda: hold.held_count() == 1, "the pull is held")
            sent = rmq_pb2_grpc.MessagingServiceStub(channel).SendMessage(rmq_pb2.SendMessageRequest(
                topic="T", messages=[rmq_pb2.Message(body=b"alone")]), timeout=10)
            assert sent.status.code == rmq_pb2.FLUSH_SLAVE_TIMEOUT   # stored on the master only
            assert not pull.done() and store.get_max_offset_in_queue("T", 0) == 0
            store.ha_service.slave_acked(slave, store.get_commit_log_max_offset())
            answer = pull.result(timeout=10)
            assert answer.pull_status == rmq_pb2.FOUND and [m.body for m in decode(answer)] == [b"alone"]
    finally:
        broker.run(manager.close())
        broker.stop()


def test_with_min_in_sync_1_a_slave_counts_from_the_heartbeat_reporting_it_before_the_answer(
        tmp_path: Path) -> None:
    """A master acknowledging alone (the controller's set: itself) that reports a caught-up slave
    stops acknowledging alone when it sends the report: the controller may take the slave into
    the set before its answer arrives, and the slave must then hold every acknowledged send."""
    broker = InProcessBroker(tmp_path / "broker", controller="127.0.0.1:1", broker_role="SYNC_MASTER",
                             min_in_sync_replicas=1, store={"sync_flush_timeout_ms": 100}).start()

    async def open_manager() -> ReplicasManager:
        return ReplicasManager(broker.config, ServerSecurity())

    manager = broker.run(open_manager())
    store = broker.controller.store
    while_reported: list[PutMessageStatus] = []

    async def controller_takes_the_report(epoch: int, max_offset: int, in_sync: list[str]
                                          ) -> rmq_pb2.ControllerHeartbeatResponse:
        while_reported.append(store.put_message(message()).status)   # before the answer arrives
        return rmq_pb2.ControllerHeartbeatResponse(
            status=rmq_pb2.Status(code=rmq_pb2.OK), epoch=1, master_broker_id=0,
            master_address=broker.address, in_sync_ids=[0, 1] if in_sync else [0])

    manager.heartbeat = controller_takes_the_report  # type: ignore[method-assign]
    term = RoleAssignment(epoch=1, master_id=0, master_address=broker.address, truncate_to=-1,
                          in_sync_ids=(0,))
    try:
        assert broker.run(manager._beat(broker.controller, term))   # the set: the master alone
        assert store.put_message(message()).status is PutMessageStatus.PUT_OK   # alone
        slave = store.ha_service.connect_slave("127.0.0.1:2", store.get_commit_log_max_offset())
        assert broker.run(manager._beat(broker.controller, term))   # reports the slave
        # no set confirmed yet during the first beat; the reported slave counts during the second
        assert while_reported == [PutMessageStatus.SLAVE_NOT_AVAILABLE, PutMessageStatus.FLUSH_SLAVE_TIMEOUT]
        store.ha_service.slave_acked(slave, 1 << 40)
        assert store.put_message(message()).status is PutMessageStatus.PUT_OK   # on the slave
    finally:
        broker.run(manager.close())
        broker.stop()
