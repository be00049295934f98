"""The controller on etcd (docs/controller.md, "Controller on etcd") against a real etcd member on
loopback: leader election by a lease-bound key, a deposed leader writing nothing, a group key
changed by hand to an older epoch refused, two clusters on one etcd, an unreachable etcd at start,
etcd without its majority (no failover, one log line per 10 s), a broker following the leader,
and the cluster-secret proof still checked first."""

from __future__ import annotations

import asyncio
import logging
import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rmq.broker_server.config import BrokerConfig, NameServerConfig
from rmq.broker_server.errors import UserError
from rmq.broker_server.name_server.namesrv_controller import controller_auth, controllers_on_etcd
from rmq.broker_server.replication.controller_manager import ControllerService
from rmq.broker_server.replication.etcd_client import EtcdClient, EtcdSettings, put
from rmq.broker_server.replication.etcd_controller import EtcdGroupStore, EtcdLeadership, encode_group
from rmq.broker_server.replication.replicas_info_manager import Heartbeat, ReplicasInfoManager
from rmq.broker_server.replication.replicas_manager import ReplicasManager
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from testing.etcd import EtcdCluster, EtcdTls, enable_auth, etcd_missing
from testing.processes import RMQ, free_port
from tests.broker_server.test_replication import write_secret
from tests.tls_certs import make_tls_files

pytestmark = pytest.mark.skipif(etcd_missing() is not None, reason=etcd_missing() or "")

CLUSTER = "DefaultCluster"
TTL_S = 1   # etcd raises it to its minimum (1.5 x the election timeout: 2 s here)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    cluster = EtcdCluster(tmp_path_factory.mktemp("etcd")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


prefixes = iter(range(1_000_000))


@pytest.fixture
def prefix() -> str:
    """Each test its own keys on the shared etcd (as two clusters would use two prefixes)."""
    return f"/test{next(prefixes)}"


def controller(etcd: EtcdCluster, prefix: str, address: str, clock: Clock | None = None,
               cluster: str = CLUSTER) -> EtcdLeadership:
    client = EtcdClient(EtcdSettings(tuple(etcd.endpoints.split(",")), prefix))
    store = EtcdGroupStore(client, prefix)
    replicas = ReplicasInfoManager(cluster, store, 3000, clock=clock or Clock())
    return EtcdLeadership(client, store, replicas, address, TTL_S, clock=clock or Clock())


def beat(broker_id: int, address: str, epoch: int = 0, max_offset: int = -1,
         in_sync: tuple[str, ...] = ()) -> Heartbeat:
    return Heartbeat("g", broker_id, address, epoch, max_offset, in_sync)


async def decide(leader: EtcdLeadership, heartbeat: Heartbeat) -> rmq_pb2.ControllerHeartbeatResponse:
    """A heartbeat as the controller's service answers it."""
    service = ControllerService(leader.replicas, None, leader)
    return await service._decide(leader, CLUSTER, heartbeat)


def test_one_controller_leads_the_other_follows_and_takes_over_with_the_state(etcd: EtcdCluster,
                                                                               prefix: str) -> None:
    async def scenario() -> None:
        first, second = controller(etcd, prefix, "127.0.0.1:1"), controller(etcd, prefix, "127.0.0.1:2")
        for leadership in (first, second):
            await leadership.store.claim_prefix(CLUSTER)
            await leadership.tick()
        assert (first.leading, second.leading, second.leader_address) == (True, False, "127.0.0.1:1")
        assert (await decide(first, beat(0, "127.0.0.1:10"))).master_broker_id == 0
        await decide(first, beat(0, "127.0.0.1:10", epoch=1, max_offset=0))
        refused = await decide(second, beat(1, "127.0.0.1:11"))
        assert (refused.not_leader, refused.leader_address) == (True, "127.0.0.1:1")
        await first.resign()   # as a dead leader's lease running out, at once
        await second.tick()
        assert second.leading
        answer = await decide(second, beat(1, "127.0.0.1:11"))
        assert (answer.epoch, answer.master_broker_id, answer.master_address) == (1, 0, "127.0.0.1:10")
        assert second.replicas.groups["g"].epoch_starts == {1: 0}
        for leadership in (first, second):
            await leadership.client.close()

    asyncio.run(scenario())


def test_a_deposed_leader_writes_nothing_and_the_epoch_only_moves_forward(etcd: EtcdCluster,
                                                                          prefix: str) -> None:
    """The first leader loses its lease without noticing (a long pause); the second leads and
    elects; the first's next decision (an older view) is not written and not answered."""
    async def scenario() -> None:
        first, second = controller(etcd, prefix, "127.0.0.1:1"), controller(etcd, prefix, "127.0.0.1:2")
        await first.store.claim_prefix(CLUSTER)
        await first.tick()
        await decide(first, beat(0, "127.0.0.1:10"))
        await decide(first, beat(0, "127.0.0.1:10", epoch=1, max_offset=0))
        await first.client.revoke_lease(first.lease)   # its lease is gone; it still believes it leads
        await second.tick()   # leads, having read the group at the revision the first wrote it at
        answer = await decide(first, beat(2, "127.0.0.1:12"))
        assert answer.not_leader and not first.leading
        assert answer.leader_address != "127.0.0.1:1"   # a deposed leader never names itself the leader
        await decide(second, beat(1, "127.0.0.1:11"))   # id 1 joins in epoch 1
        kv = await second.client.get(second.store.key("g"))
        assert kv is not None and set(second.replicas.groups["g"].members) == {0, 1}
        assert b'"127.0.0.1:12"' not in kv.value
        for leadership in (first, second):
            await leadership.client.close()

    asyncio.run(scenario())


def test_a_controller_whose_creation_of_the_leader_key_went_unanswered_leads(etcd: EtcdCluster,
                                                                             prefix: str) -> None:
    """The transaction creating the leader key was applied but its answer lost (a deadline, an
    etcd member stopped after the write), so the call was made again: the key names this
    controller, bound to its own lease. It leads (it used to follow, naming itself the leader
    and keeping the key alive with its renewals: no controller led while it lived)."""
    async def scenario() -> None:
        first, second = controller(etcd, prefix, "127.0.0.1:1"), controller(etcd, prefix, "127.0.0.1:2")
        await first.store.claim_prefix(CLUSTER)
        first.lease = await first.client.grant_lease(TTL_S)
        await first.client.txn([], [put(first.store.leader_key, b"127.0.0.1:1", first.lease)])
        await first.tick()
        await second.tick()
        assert (first.leading, second.leading, second.leader_address) == (True, False, "127.0.0.1:1")
        assert (await decide(first, beat(0, "127.0.0.1:10"))).master_broker_id == 0
        for leadership in (first, second):
            await leadership.client.close()

    asyncio.run(scenario())


def test_a_group_key_changed_by_hand_to_an_older_epoch_is_refused_and_logged(
        etcd: EtcdCluster, prefix: str, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> bytes:
        leader = controller(etcd, prefix, "127.0.0.1:1")
        await leader.store.claim_prefix(CLUSTER)
        await leader.tick()
        await decide(leader, beat(0, "127.0.0.1:10"))
        await decide(leader, beat(0, "127.0.0.1:10", epoch=1, max_offset=0))
        older = leader.replicas.groups["g"].to_json()
        older["epoch"], older["master_id"] = 0, 1
        await leader.client.txn([], [put(leader.store.key("g"), encode_group(
            type(leader.replicas.groups["g"]).from_json(older)))])
        answer = await decide(leader, beat(1, "127.0.0.1:11"))   # a change: written over the hand edit
        assert (answer.status.code, answer.epoch, answer.master_broker_id) == (rmq_pb2.OK, 1, 0)
        kv = await leader.client.get(leader.store.key("g"))
        await leader.client.close()
        return kv.value if kv is not None else b""

    with caplog.at_level(logging.ERROR):
        written = asyncio.run(scenario())
    assert '"epoch": 1' in written.decode()
    assert any("was changed outside the controller (epoch 0): refused" in record.getMessage()
               for record in caplog.records)


def test_two_clusters_share_an_etcd_by_prefix_and_collide_with_a_clear_error(etcd: EtcdCluster,
                                                                              prefix: str) -> None:
    async def scenario() -> None:
        ours = controller(etcd, prefix, "127.0.0.1:1")
        await ours.store.claim_prefix(CLUSTER)
        other = controller(etcd, prefix, "127.0.0.1:2", cluster="other")
        with pytest.raises(UserError, match=f"etcd prefix {prefix}/ holds the controller state of cluster "
                                            f"'DefaultCluster', not 'other': give each cluster its own"):
            await other.store.claim_prefix("other")
        separate = controller(etcd, prefix + "-other", "127.0.0.1:2", cluster="other")
        await separate.store.claim_prefix("other")
        await separate.tick()
        await ours.tick()
        assert ours.leading and separate.leading   # each cluster's controllers elect their own leader
        for leadership in (ours, other, separate):
            await leadership.client.close()

    asyncio.run(scenario())


def test_an_unreachable_etcd_at_start_is_one_line_naming_the_endpoints() -> None:
    endpoints = f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    config = NameServerConfig(controller=True, etcd=endpoints)
    with pytest.raises(UserError) as refused:
        asyncio.run(controllers_on_etcd(config))
    message = str(refused.value)
    assert message.startswith(f"the controller cannot reach etcd at {endpoints}: no etcd endpoint answered")
    assert "\n" not in message
    started = subprocess.run([*RMQ, "namesrv", "--listen", f"127.0.0.1:{free_port()}", "--controller",
                              "--etcd", endpoints], capture_output=True, text=True, timeout=60)
    errors = [line for line in started.stderr.splitlines() if line.startswith("rmq: error:")]
    assert started.returncode == 2 and "Traceback" not in started.stderr
    assert len(errors) == 1
    assert errors[0].startswith(f"rmq: error: the controller cannot reach etcd at {endpoints}")


def test_without_etcd_nothing_fails_over_and_a_line_every_10_s_says_why(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The leader's etcd stops answering: the master goes silent, yet nobody is elected (the
    leader steps down once its lease could not be renewed); one log line per 10 s."""
    etcd = EtcdCluster(tmp_path).start()
    clock = Clock()

    async def scenario() -> list[str]:
        leader = controller(etcd, "/lost", "127.0.0.1:1", clock)
        await leader.store.claim_prefix(CLUSTER)
        await leader.tick()
        await decide(leader, beat(0, "127.0.0.1:10"))
        await decide(leader, beat(0, "127.0.0.1:10", epoch=1, max_offset=0))
        await decide(leader, beat(1, "127.0.0.1:11"))
        await decide(leader, beat(0, "127.0.0.1:10", epoch=1, max_offset=0, in_sync=("127.0.0.1:11",)))
        etcd.kill(etcd.members[0])
        for _ in range(5):   # 0, 4, 8, 12, 16 s: the master is silent well past the failover timeout
            await decide(leader, beat(1, "127.0.0.1:11", epoch=1, max_offset=0))
            await leader.attempt(leader.tick)
            await leader.attempt(leader.scan)
            clock.now += 4
        group = leader.replicas.groups["g"]
        assert (group.epoch, group.master_id, leader.leading) == (1, 0, False)
        await leader.client.close()
        return [r.getMessage() for r in caplog.records if "etcd does not answer" in r.getMessage()]

    try:
        with caplog.at_level(logging.ERROR):
            lines = asyncio.run(scenario())
    finally:
        etcd.stop()
    assert len(lines) == 2   # at 0 s and at 12 s
    assert "no failover until it does; brokers keep their roles and keep serving" in lines[0]


def test_a_broker_finds_the_leader_among_its_controllers_and_proves_every_heartbeat(
        etcd: EtcdCluster, prefix: str, tmp_path: Path) -> None:
    """`rmq broker --controller FOLLOWER,LEADER`: the follower answers "not leader, the leader is
    X" and the broker asks X; a heartbeat without the cluster secret's proof is refused by both."""
    secret = write_secret(tmp_path / "secret")

    async def scenario() -> tuple[rmq_pb2.ControllerHeartbeatResponse, rmq_pb2.ControllerHeartbeatResponse]:
        servers, addresses = [], []
        leaderships = []
        for _ in range(2):
            server = grpc.aio.server()
            address = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
            leadership = controller(etcd, prefix, address)
            auth = controller_auth(NameServerConfig(controller=True, cluster_secret_file=secret),
                                   ServerSecurity())
            rmq_pb2_grpc.add_ControllerServiceServicer_to_server(
                ControllerService(leadership.replicas, auth, leadership), server)
            await server.start()
            servers.append(server)
            addresses.append(address)
            leaderships.append(leadership)
        await leaderships[1].store.claim_prefix(CLUSTER)
        await leaderships[1].tick()
        await leaderships[0].tick()
        try:
            controllers = ",".join(addresses)
            config = BrokerConfig(controller=controllers, store_dir=str(tmp_path / "s"), broker_name="g",
                                  cluster_secret_file=secret)
            member = ReplicasManager(config, ServerSecurity())
            followed = await member.heartbeat(0, -1, [])
            await member.close()
            unproven = ReplicasManager(BrokerConfig(controller=controllers, store_dir=str(tmp_path / "u"),
                                                    broker_name="g", broker_id=1), ServerSecurity())
            refused = await unproven.heartbeat(0, -1, [])
            await unproven.close()
            return followed, refused
        finally:
            for server in servers:
                await server.stop(None)
            for leadership in leaderships:
                await leadership.client.close()

    followed, refused = asyncio.run(scenario())
    assert (followed.status.code, followed.epoch, followed.master_broker_id) == (rmq_pb2.OK, 1, 0)
    assert refused.status.code == rmq_pb2.NO_PERMISSION


def test_an_etcd_with_client_certificates_takes_the_controller_with_its_tls_settings(tmp_path: Path) -> None:
    """--etcd-ca/--etcd-cert/--etcd-key: the controller leads over TLS; without the client
    certificate etcd refuses it and the start fails with one line naming the endpoint."""
    files = make_tls_files(tmp_path / "tls")
    etcd = EtcdCluster(tmp_path, tls=EtcdTls(files.ca, files.server_cert, files.server_key, files.client_cert,
                                             files.client_key)).start()

    async def scenario() -> None:
        config = NameServerConfig(controller=True, etcd=etcd.endpoints, etcd_ca_file=str(files.ca),
                                  etcd_cert_file=str(files.client_cert), etcd_key_file=str(files.client_key))
        leadership = await controllers_on_etcd(config)
        await leadership.tick()
        assert leadership.leading
        await leadership.close()
        with pytest.raises(UserError, match=f"the controller cannot reach etcd at {etcd.endpoints}"):
            await controllers_on_etcd(NameServerConfig(controller=True, etcd=etcd.endpoints,
                                                       etcd_ca_file=str(files.ca)))

    try:
        asyncio.run(scenario())
    finally:
        etcd.stop()


def test_an_etcd_with_authentication_takes_the_controller_with_its_user_and_password(tmp_path: Path) -> None:
    """--etcd-user/--etcd-password-file: the controller signs in and leads; a wrong password is
    refused at start in one line."""
    etcd = EtcdCluster(tmp_path).start()
    enable_auth(etcd.members[0], "root-password")

    async def scenario() -> None:
        good, bad = tmp_path / "password", tmp_path / "wrong"
        good.write_text("root-password\n")
        bad.write_text("not it\n")
        config = NameServerConfig(controller=True, etcd=etcd.endpoints, etcd_user="root",
                                  etcd_password_file=str(good))
        leadership = await controllers_on_etcd(config)
        await leadership.tick()
        assert leadership.leading
        await leadership.close()
        with pytest.raises(UserError, match="authentication failed"):
            await controllers_on_etcd(NameServerConfig(controller=True, etcd=etcd.endpoints, etcd_user="root",
                                                       etcd_password_file=str(bad)))

    try:
        asyncio.run(scenario())
    finally:
        etcd.stop()
