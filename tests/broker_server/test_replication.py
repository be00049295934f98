"""A broker group in this test process (InProcessBrokers: a master and a slave whose HAClient
copies its CommitLog over HAService.Transfer), so a test can hold what the slave receives, see
what the master answers and pose as either member (docs/replication.md)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import grpc
import pytest

from rmq import request_signing
from rmq.auth import ClientSecurity
from rmq.broker_server.errors import UserError
from rmq.broker_server.offsets.subscription_group_manager import (
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from rmq.broker_server.processors.topic_config_manager import TopicConfig
from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.cluster_auth import ClusterAuth, Exchange, ProofRefused, load_cluster_secret
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.errors import RmqError
from rmq.connector.spark.message_decoder import decode
from rmq.store import MessageStore, PutMessageStatus
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from tests.acl_files import write_acl
from tests.broker_server.in_process_broker import InProcessBroker
from tests.store.conftest import message
from tests.waiting import wait_until

FILE_SIZE = 64 * 1024          # CommitLog file size of both members
SLAVE_TIMEOUT_MS = 300         # how long a SYNC_MASTER waits for the slave where a test holds it
PATIENT_MS = 20_000            # where a test needs the slave's confirmation (a loaded machine is slow)
DEADLINE_S = 30


def write_secret(path: Path, text: str = "the group's secret: 32 characters") -> str:
    path.touch(mode=0o600)
    path.write_text(text)
    return str(path)


@pytest.fixture
def members(tmp_path: Path) -> Iterator[Callable[..., InProcessBroker]]:
    """members(name, security=None, slave_timeout_ms=SLAVE_TIMEOUT_MS, **BrokerConfig settings) ->
    a started member of group "group" (a slave: broker_role="SLAVE", broker_id, master); all are
    stopped at the end."""
    started: list[InProcessBroker] = []

    def start(name: str, security: ServerSecurity | None = None, slave_timeout_ms: int = SLAVE_TIMEOUT_MS,
              **settings: Any) -> InProcessBroker:
        store = {"mapped_file_size_commit_log": FILE_SIZE, "sync_flush_timeout_ms": slave_timeout_ms}
        broker = InProcessBroker(tmp_path / name, security, broker_name="group", store=store, **settings)
        started.append(broker.start())
        return broker

    yield start
    for broker in reversed(started):
        broker.stop()


def slave_of(master: InProcessBroker, **settings: Any) -> dict[str, Any]:
    return {"broker_role": "SLAVE", "broker_id": 1, "master": master.address, **settings}


ADMIN = ("admin01", "admin-secret-0001")
ACL = f"accounts:\n  - {{accessKey: {ADMIN[0]}, secretKey: '{ADMIN[1]}', admin: true}}\n"


def secured(tmp_path: Path) -> ServerSecurity:
    """--acl with one admin account, whose keys the member's own calls (a slave's) are signed with."""
    acl = write_acl(tmp_path / "acl.yml", ACL)
    return ServerSecurity(AclFile(acl), outgoing=ClientSecurity(*ADMIN))


@pytest.fixture
def group(members, tmp_path: Path) -> tuple[InProcessBroker, InProcessBroker]:
    """A SYNC_MASTER and its slave sharing a cluster secret."""
    secret = write_secret(tmp_path / "secret")
    master = members("master", broker_role="SYNC_MASTER", cluster_secret_file=secret)
    return master, members("slave", **slave_of(master, cluster_secret_file=secret))


def in_sync(master: MessageStore, slave: MessageStore) -> bool:
    end = master.get_commit_log_max_offset()
    return slave.get_commit_log_max_offset() == end and any(
        s.ack_offset == end for s in master.ha_service.slaves())


class ChunkGate:
    """Holds the replicated chunks a slave store receives from the n-th one on (the slave's
    HAClient then neither writes nor acknowledges them) until released."""

    def __init__(self, store: MessageStore, hold_from: int) -> None:
        self.received: list[tuple[int, int]] = []     # (offset, length) of each chunk
        self._store_append = store.append_replicated
        self._hold_from = hold_from
        self._open = threading.Event()
        store.append_replicated = self._append  # type: ignore[method-assign]

    def _append(self, offset: int, data: bytes) -> None:
        self.received.append((offset, len(data)))
        if len(self.received) >= self._hold_from:
            self._open.wait(DEADLINE_S)
        self._store_append(offset, data)

    def release(self) -> None:
        self._open.set()


def test_sync_master_acknowledges_only_what_the_slave_holds(group) -> None:
    """A batch that crosses a CommitLog file end reaches the slave as two chunks; while the
    second is held, the slave has not got the batch, so the put answers FLUSH_SLAVE_TIMEOUT."""
    master, slave = group
    master_store, slave_store = master.controller.store, slave.controller.store
    body = b"x" * 1000
    wait_until(lambda: bool(master_store.ha_service.slaves()), "the slave to connect")
    while master_store.get_commit_log_max_offset() < FILE_SIZE - 4 * len(body):   # near the file end
        master_store.put_message(message(body=body))
    wait_until(lambda: in_sync(master_store, slave_store), "the slave to catch up")
    start = master_store.get_commit_log_max_offset()
    gate = ChunkGate(slave_store, hold_from=2)
    try:
        results = master_store.put_messages([message(body=body) for _ in range(8)])   # ~8 KiB: crosses
        assert {r.status for r in results} == {PutMessageStatus.FLUSH_SLAVE_TIMEOUT}
        assert gate.received[0] == (start, FILE_SIZE - start)                # to the file end
        assert gate.received[1][0] == FILE_SIZE                              # the next file
    finally:
        gate.release()
    wait_until(lambda: in_sync(master_store, slave_store), "the held chunk to be acknowledged")


@pytest.fixture
def secured_group(members, tmp_path: Path) -> tuple[InProcessBroker, InProcessBroker]:
    """The group with --acl on both members."""
    secret = write_secret(tmp_path / "secret")
    master = members("master", secured(tmp_path), broker_role="SYNC_MASTER", cluster_secret_file=secret)
    return master, members("slave", secured(tmp_path), **slave_of(master, cluster_secret_file=secret))


def test_a_call_signed_for_the_master_is_refused_by_its_slave(secured_group) -> None:
    """Each member of a group checks its own server id: a call captured on its way to the
    master cannot be replayed to the slave (nor one for the slave to the master)."""
    master, slave = secured_group
    method = "/rmq.v1.AdminService/GetBrokerStatus"
    request = rmq_pb2.BrokerStatusRequest()

    def call(broker: InProcessBroker, headers: request_signing.SignedHeaders) -> rmq_pb2.BrokerStatusResponse:
        with grpc.insecure_channel(broker.address) as channel:
            return rmq_pb2_grpc.AdminServiceStub(channel).GetBrokerStatus(
                request, metadata=headers.as_metadata(), timeout=DEADLINE_S)

    for signed_for, replayed_on, own_id in ((master, slave, "broker/group/1"),
                                            (slave, master, "broker/group")):
        target = request_signing.broker_server_id("group", signed_for.config.broker_id)
        captured = request_signing.sign(*ADMIN, target, method, request)
        assert call(signed_for, captured).broker_id == signed_for.config.broker_id
        with pytest.raises(grpc.RpcError) as refused:
            call(replayed_on, captured)
        assert refused.value.code() is grpc.StatusCode.UNAUTHENTICATED
        assert refused.value.details() == f"call signed for server {target!r}, this is {own_id!r}"


def status(broker: InProcessBroker) -> rmq_pb2.BrokerStatusResponse:
    return broker.controller.replication.status()


def test_a_slave_takes_nothing_from_a_master_without_the_groups_secret(members, tmp_path: Path,
                                                                       caplog) -> None:
    """Whoever answers on a slave's --master address (here a broker without the secret, holding
    a topic and a message) can neither inject records nor replace the slave's topics."""
    impostor = members("impostor")
    impostor.controller.topics.create(TopicConfig("injected", 1, 1))
    assert impostor.controller.store.put_message(message(topic="injected", body=b"forged")).ok
    slave = members("slave", **slave_of(impostor, cluster_secret_file=write_secret(tmp_path / "secret"),
                                        slave_synchronize_interval_ms=50))
    wait_until(lambda: "no valid cluster MAC" in status(slave).replication_error, "the slave to refuse it")
    wait_until(lambda: "SlaveSynchronize answer from" in caplog.text, "a SlaveSynchronize to be refused")
    assert slave.controller.store.get_commit_log_max_offset() == 0
    assert "injected" not in {config.topic_name for config in slave.controller.topics.all()}


@pytest.mark.parametrize("slave_secret", [None, "another group's secret, 32 chars"])
def test_a_master_sends_nothing_to_a_slave_without_the_groups_secret(members, tmp_path: Path,
                                                                      slave_secret: str | None) -> None:
    master = members("master", cluster_secret_file=write_secret(tmp_path / "secret"))
    assert master.controller.store.put_message(message(body=b"confidential")).ok
    settings = {"cluster_secret_file": write_secret(tmp_path / "other", slave_secret)} if slave_secret else {}
    slave = members("slave", **slave_of(master, **settings))
    expected = "sent no cluster proof" if slave_secret is None else "cluster proof does not verify"
    wait_until(lambda: expected in status(slave).replication_error, "the master's refusal")
    assert slave.controller.store.get_commit_log_max_offset() == 0
    assert status(master).slaves == []


class RawTransfer:
    """A Transfer stream opened by the test with a report it made: its first answer that holds
    CommitLog bytes or a refusal, then closed."""

    def __init__(self, address: str, report: rmq_pb2.HAReport) -> None:
        self.address = address
        self.report = report

    def first_answer(self) -> rmq_pb2.HATransfer:
        done = threading.Event()

        def reports() -> Iterator[rmq_pb2.HAReport]:
            yield self.report
            done.wait(DEADLINE_S)   # the stream stays open until the answer is read

        with grpc.insecure_channel(self.address) as channel:
            call = rmq_pb2_grpc.HAServiceStub(channel).Transfer(reports(), timeout=DEADLINE_S)
            try:
                return next(answer for answer in call if answer.data or answer.status.code != rmq_pb2.OK)
            finally:
                done.set()
                call.cancel()


def test_a_captured_or_relayed_proof_opens_no_transfer(members, tmp_path: Path) -> None:
    """A slave's proof is bound to the master address it dialed and good for one transfer: a
    third party that relays it to the real master, or replays a captured one, gets nothing."""
    secret = write_secret(tmp_path / "secret")
    master = members("master", cluster_secret_file=secret)
    assert master.controller.store.put_message(message(body=b"confidential")).ok
    slave_side = ClusterAuth(load_cluster_secret(Path(secret)), "group")

    relayed = rmq_pb2.HAReport(address="127.0.0.1:1")
    slave_side.prove(relayed, Exchange.TRANSFER, 1, "127.0.0.1:9")   # the slave dialed the relay
    answer = RawTransfer(master.address, relayed).first_answer()
    assert answer.status.code == rmq_pb2.NO_PERMISSION and not answer.data
    assert "refused as relayed" in answer.status.message

    captured = rmq_pb2.HAReport(address="127.0.0.1:1")
    slave_side.prove(captured, Exchange.TRANSFER, 1, master.address)
    assert RawTransfer(master.address, captured).first_answer().data   # its own use
    replayed = RawTransfer(master.address, captured).first_answer()
    assert replayed.status.code == rmq_pb2.NO_PERMISSION and not replayed.data
    assert "refused as replayed" in replayed.status.message


def test_with_an_acl_every_member_needs_the_cluster_secret(members, tmp_path: Path) -> None:
    """An --acl group does not fall back to trusting whoever answers: a slave without the
    secret does not start, a master without it admits no slave."""
    master = members("master", secured(tmp_path))
    with pytest.raises(UserError, match="a SLAVE of a broker with --acl needs --cluster-secret FILE"):
        members("slave", secured(tmp_path), **slave_of(master))
    with pytest.raises(ProofRefused, match="runs with --acl but without --cluster-secret"):
        master.controller.replication.servicer.auth.admit(rmq_pb2.HAReport(), Exchange.TRANSFER)


def patient_group(members, tmp_path: Path) -> tuple[InProcessBroker, InProcessBroker]:
    """A SYNC_MASTER that waits long for its slave, and a slave that synchronises only hourly
    (what it has sooner came on the Transfer stream); the slave is connected."""
    secret = write_secret(tmp_path / "secret")
    master = members("master", broker_role="SYNC_MASTER", cluster_secret_file=secret,
                     slave_timeout_ms=PATIENT_MS)
    slave = members("slave", **slave_of(master, cluster_secret_file=secret,
                                        slave_synchronize_interval_ms=3_600_000))
    wait_until(lambda: bool(master.controller.store.ha_service.slaves()), "the slave to connect")
    return master, slave


def test_a_young_topic_reaches_the_slave_with_its_data(members, tmp_path: Path) -> None:
    """Issue #31's scenario: a topic created on a SYNC_MASTER and sent to, then the master lost,
    well within the slave's periodic synchronisation: the slave serves every message."""
    master, slave = patient_group(members, tmp_path)
    sent = [b"young %d" % index for index in range(50)]
    with closing(RmqClient(master.address, timeout=DEADLINE_S)) as producer:
        producer.create_topic("young", queues=2)
        assert slave.controller.topics.get("young") == TopicConfig("young", 2, 2)   # before the answer
        assert producer.send("young", [OutgoingMessage(body) for body in sent]).status == rmq_pb2.OK
    master.stop()
    with closing(RmqClient(slave.address, timeout=DEADLINE_S)) as reader:
        read = []
        for mq, offsets in reader.topic_offsets("young").items():
            pulled = reader.pull(mq, offsets.min_offset, 100, group="reader")
            read += decode(pulled.messages, mq.broker_name).column("body").to_pylist()
    assert sorted(read) == sorted(sent)


def test_a_sync_master_answers_a_topic_change_once_the_slave_has_it(group) -> None:
    """While the slave does not apply the master's topic table, CreateTopic on the SYNC_MASTER
    answers FLUSH_SLAVE_TIMEOUT (the topic is created on the master all the same)."""
    master, slave = group
    wait_until(lambda: bool(master.controller.store.ha_service.slaves()), "the slave to connect")
    applied = threading.Event()
    create = slave.controller.topics.create

    def held_create(config: TopicConfig) -> None:
        applied.wait(DEADLINE_S)
        create(config)

    slave.controller.topics.create = held_create  # type: ignore[method-assign]
    request = rmq_pb2.CreateTopicRequest(config=TopicConfig("held", 1, 1).to_proto())
    try:
        with grpc.insecure_channel(master.address) as channel:
            answer = rmq_pb2_grpc.AdminServiceStub(channel).CreateTopic(request, timeout=DEADLINE_S)
    finally:
        applied.set()
    assert answer.status.code == rmq_pb2.FLUSH_SLAVE_TIMEOUT, answer.status
    assert "stored on the master only" in answer.status.message
    assert master.controller.topics.get("held") is not None
    wait_until(lambda: slave.controller.topics.get("held") is not None, "the slave to apply it")


def test_a_master_counts_no_acknowledgement_without_the_session_mac(members, tmp_path: Path, caplog) -> None:
    """A report that is not the proven slave's (no session MAC: forged or injected into the
    stream) is not counted, so it cannot make a SYNC_MASTER acknowledge what no slave holds;
    the stream ends."""
    secret = write_secret(tmp_path / "secret")
    master = members("master", broker_role="SYNC_MASTER", cluster_secret_file=secret)
    hello = rmq_pb2.HAReport(address="127.0.0.1:1")
    ClusterAuth(load_cluster_secret(Path(secret)), "group").prove(hello, Exchange.TRANSFER, 1, master.address)
    forged = rmq_pb2.HAReport(max_offset=1 << 40)
    done = threading.Event()

    def reports() -> Iterator[rmq_pb2.HAReport]:
        yield hello
        yield forged
        done.wait(DEADLINE_S)

    with grpc.insecure_channel(master.address) as channel:
        call = rmq_pb2_grpc.HAServiceStub(channel).Transfer(reports(), timeout=DEADLINE_S)
        try:
            answers = list(call)   # until the master ends the stream
        finally:
            done.set()
    assert answers and all(not answer.data for answer in answers)
    assert "report not counted, stream ended" in caplog.text
    assert master.controller.store.ha_service.slaves() == []


def test_consumer_offsets_committed_on_the_master_reach_the_slave(members, tmp_path: Path) -> None:
    """A consumer that fails over to the slave resumes where it committed on the master, not
    where the slave's last periodic synchronisation (hourly here) left it."""
    master, slave = patient_group(members, tmp_path)
    with closing(RmqClient(master.address, timeout=DEADLINE_S)) as consumer:
        consumer.create_topic("orders", queues=2)
        queues = consumer.query_route("orders").message_queues
        consumer.update_consumer_offsets("billing", {mq: 40 + mq.queue_id for mq in queues})
    offsets = slave.controller.offsets
    wait_until(lambda: [offsets.query_offset("billing", "orders", q) for q in (0, 1)] == [40, 41],
               "the offsets on the slave")


def test_a_slave_report_counts_only_up_to_what_was_sent_to_it(members, caplog) -> None:
    """Without a cluster secret too: a report beyond the bytes sent on the stream (a slave that
    claims more than it received) counts only what was sent."""
    master = members("master")
    assert master.controller.store.put_message(message(body=b"sent")).ok
    end = master.controller.store.get_commit_log_max_offset()
    first_answer = threading.Event()
    done = threading.Event()

    def reports() -> Iterator[rmq_pb2.HAReport]:
        yield rmq_pb2.HAReport(address="127.0.0.1:1")
        first_answer.wait(DEADLINE_S)
        yield rmq_pb2.HAReport(max_offset=1 << 40)
        done.wait(DEADLINE_S)

    with grpc.insecure_channel(master.address) as channel:
        call = rmq_pb2_grpc.HAServiceStub(channel).Transfer(reports(), timeout=DEADLINE_S)
        try:
            assert next(answer for answer in call if answer.data).data
            first_answer.set()
            wait_until(lambda: "beyond the" in caplog.text, "the report to be read")
            assert [slave.ack_offset for slave in master.controller.store.ha_service.slaves()] == [end]
        finally:
            done.set()
            call.cancel()


def test_subscription_group_settings_reach_the_slave_and_hold_after_failover(members, tmp_path: Path) -> None:
    """Issue #46: after a SlaveSynchronize round the slave stores the master's per-group settings
    (durably: a restarted slave has them) and the groups the admin deleted are gone from it, so a
    group disabled on the master stays disabled on the slave that serves its reads once the master
    is lost."""
    master, slave = patient_group(members, tmp_path)
    synchronize = slave.controller.replication.synchronize
    assert synchronize is not None
    with closing(RmqClient(master.address, timeout=DEADLINE_S)) as admin:
        admin.create_topic("orders", queues=1)
        assert admin.send("orders", [OutgoingMessage(b"x", queue_id=0)]).status == rmq_pb2.OK
        for name, enabled, retries in (("billing", False, 3), ("audit", True, 5)):
            admin.update_subscription_group("group", rmq_pb2.SubscriptionGroupConfig(
                consumer_group=name, consume_enable=enabled, retry_max_times=retries))
        slave.run(synchronize.sync_all())
        groups = slave.controller.subscription_groups
        assert groups.find("billing") == SubscriptionGroupConfig("billing", False, 3)
        assert groups.find("audit") == SubscriptionGroupConfig("audit", True, 5)
        assert admin.delete_subscription_group("group", "audit")
    slave.run(synchronize.sync_all())
    assert groups.find("audit") is None
    stored = SubscriptionGroupManager(tmp_path / "slave", max_groups=10)
    stored.load()
    assert stored.all() == [SubscriptionGroupConfig("billing", False, 3)]
    master.stop()
    queue = MessageQueue("orders", "group", 0)
    with closing(RmqClient(slave.address, timeout=DEADLINE_S)) as reader:
        assert reader.pull(queue, 0, 1, group="other").messages   # a SYNC_MASTER sent it on
        with pytest.raises(RmqError, match="subscription group no permission, billing"):
            reader.pull(queue, 0, 1, group="billing")
