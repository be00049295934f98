"""The cluster secret of a broker group (rmq.broker_server.security.cluster_auth): a slave's proof and
the MACs of the session it opens, checked the way the master and the slave check them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rmq.broker_server.errors import UserError
from rmq.broker_server.security.cluster_auth import (
    WINDOW_MS,
    ClusterAuth,
    Direction,
    Exchange,
    ProofRefused,
    load_cluster_secret,
)
from rmq.v1 import rmq_pb2

SECRET = b"0123456789abcdef0123456789abcdef"
MASTER = "10.0.0.1:10911"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_the_secret_file_must_be_private_and_long_enough(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(SECRET + b"\n")
    path.chmod(0o644)
    with pytest.raises(UserError, match=r"readable or writable by other users \(mode 0644\): run chmod 600"):
        load_cluster_secret(path)
    path.chmod(0o600)
    assert load_cluster_secret(path) == SECRET
    path.write_bytes(b"short\n")
    with pytest.raises(UserError, match="holds 5 bytes, fewer than 16"):
        load_cluster_secret(path)
    with pytest.raises(UserError, match="No such file"):
        load_cluster_secret(tmp_path / "missing")


def proven(exchange: Exchange = Exchange.TRANSFER, secret: bytes = SECRET, name: str = "group",
           clock: Clock | None = None) -> rmq_pb2.HAReport:
    report = rmq_pb2.HAReport(max_offset=4096, address="10.0.0.2:10911")
    ClusterAuth(secret, name, clock or Clock()).prove(report, exchange, 1, MASTER)
    return report


@pytest.mark.parametrize(("change", "refusal"), [
    (lambda r: setattr(r, "max_offset", 0), "does not verify"),                 # the report it covers
    (lambda r: setattr(r.proof, "broker_id", 2), "does not verify"),            # the proof's fields
    (lambda r: setattr(r.proof, "master_address", "x:1"), "does not verify"),
])
def test_a_proof_covers_the_report_and_its_own_fields(change, refusal: str) -> None:
    report = proven()
    change(report)
    with pytest.raises(ProofRefused, match=refusal):
        ClusterAuth(SECRET, "group", Clock()).admit(report, Exchange.TRANSFER, MASTER)


def test_what_a_master_refuses() -> None:
    clock = Clock()
    master = ClusterAuth(SECRET, "group", clock)
    with pytest.raises(ProofRefused, match="does not verify: its --cluster-secret differs"):
        master.admit(proven(secret=b"another secret of 32 characters!"), Exchange.TRANSFER, MASTER)
    with pytest.raises(ProofRefused, match="does not verify"):   # a SlaveSynchronize proof opens no transfer
        master.admit(proven(Exchange.SYNCHRONIZE), Exchange.TRANSFER, MASTER)
    with pytest.raises(ProofRefused, match="not a slave of 'group'"):
        ClusterAuth(SECRET, "group", clock).admit(proven(name="other"), Exchange.TRANSFER, MASTER)
    with pytest.raises(ProofRefused, match="refused as relayed"):
        master.admit(proven(), Exchange.TRANSFER, "10.0.0.9:10911")
    old = Clock()
    old.now -= WINDOW_MS / 1000 + 1
    with pytest.raises(ProofRefused, match=r"dated -61.0 s from this server's clock"):
        master.admit(proven(clock=old), Exchange.TRANSFER, MASTER)
    with pytest.raises(ProofRefused, match="sent no cluster proof"):
        master.admit(rmq_pb2.HAReport(), Exchange.TRANSFER, MASTER)
    report = proven(clock=clock)
    master.admit(report, Exchange.TRANSFER, MASTER)
    with pytest.raises(ProofRefused, match="refused as replayed"):
        master.admit(report, Exchange.TRANSFER, MASTER)


def test_every_message_of_a_session_is_checked_in_order_and_direction() -> None:
    report = rmq_pb2.HAReport(address="10.0.0.2:10911")
    slave = ClusterAuth(SECRET, "group", Clock()).prove(report, Exchange.TRANSFER, 1, MASTER)
    master = ClusterAuth(SECRET, "group", Clock()).admit(report, Exchange.TRANSFER, MASTER)
    ack = rmq_pb2.HAReport(max_offset=12)
    slave.sign(Direction.FROM_SLAVE, ack)
    with pytest.raises(ProofRefused, match="message 0"):   # reflected back as the master's first message
        slave.check(Direction.FROM_MASTER, ack)
    master.check(Direction.FROM_SLAVE, ack)
    chunks = [rmq_pb2.HATransfer(offset=offset, data=b"record", master_max_offset=12) for offset in (0, 6)]
    for chunk in chunks:
        master.sign(Direction.FROM_MASTER, chunk)
    tampered = rmq_pb2.HATransfer()
    tampered.CopyFrom(chunks[0])
    tampered.data = b"forged"
    with pytest.raises(ProofRefused, match="message 0 of the exchange carries no valid cluster MAC"):
        slave.check(Direction.FROM_MASTER, tampered)
    with pytest.raises(ProofRefused, match="message 0"):    # the second chunk first: out of order
        slave.check(Direction.FROM_MASTER, chunks[1])
    slave.check(Direction.FROM_MASTER, chunks[0])
    slave.check(Direction.FROM_MASTER, chunks[1])


def heartbeat(broker_id: int = 1, address: str = "10.0.0.2:10911") -> rmq_pb2.ControllerHeartbeatRequest:
    return rmq_pb2.ControllerHeartbeatRequest(cluster_name="c", broker_name="group", broker_id=broker_id,
                                              address=address, epoch=1, max_offset=4096)


def proven_heartbeat(secret: bytes = SECRET, clock: Clock | None = None, proof_id: int = 1,
                     proof_address: str = "10.0.0.2:10911",
                     exchange: Exchange = Exchange.CONTROLLER) -> rmq_pb2.ControllerHeartbeatRequest:
    request = heartbeat()
    ClusterAuth(secret, "group", clock or Clock()).prove(request, exchange, proof_id, proof_address)
    return request


def test_what_the_controller_refuses() -> None:
    """Every controller heartbeat carries the secret's proof for the member it names (issue 39:
    a registration account alone made the controller elect a fake member)."""
    clock = Clock()
    controller = ClusterAuth(SECRET, "", clock)
    refusals = [
        (heartbeat(), "the broker sent no cluster proof"),
        (proven_heartbeat(secret=b"another secret of 32 characters!"), "does not verify"),
        (proven_heartbeat(exchange=Exchange.TRANSFER), "does not verify"),   # a slave's proof
        (proven_heartbeat(proof_id=2), "the proof is for broker 'group' id 2 at '10.0.0.2:10911', the "
                                       "heartbeat names 'group' id 1"),
        (proven_heartbeat(proof_address="10.0.0.9:10911"), "at '10.0.0.9:10911'"),
    ]
    for request, refusal in refusals:
        with pytest.raises(ProofRefused, match=refusal):
            controller.admit_member(request)
    changed = proven_heartbeat(clock=clock)
    changed.max_offset = 10**12   # what it covers: the whole heartbeat
    with pytest.raises(ProofRefused, match="does not verify"):
        controller.admit_member(changed)
    request = proven_heartbeat(clock=clock)
    controller.admit_member(request)
    with pytest.raises(ProofRefused, match="refused as replayed"):
        controller.admit_member(request)


def test_in_controller_mode_member_0_may_be_the_slave_of_another_master() -> None:
    """After a failover id 0 (the first master) replicates from id 1: the master admits any id of
    its group but its own."""
    report = rmq_pb2.HAReport(max_offset=4096, address="10.0.0.2:10911")
    ClusterAuth(SECRET, "group", Clock()).prove(report, Exchange.TRANSFER, 0, MASTER)
    ClusterAuth(SECRET, "group", Clock()).admit(report, Exchange.TRANSFER, MASTER, own_id=1)
    with pytest.raises(ProofRefused, match="id 1, not a slave of 'group'"):
        ClusterAuth(SECRET, "group", Clock()).admit(proven(), Exchange.TRANSFER, MASTER, own_id=1)
