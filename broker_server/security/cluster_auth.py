"""Authentication between the members of a broker group (docs/replication.md, "Cluster
secret"): every member is given the same secret file (`rmq broker --cluster-secret FILE`,
config key `cluster_secret_file`), and neither side of replication trusts "whoever answers".

A slave opens each exchange (a Transfer stream, a SlaveSynchronize call) with a MemberProof:
its broker name and id, the master address it dialed, a timestamp and a fresh nonce, and an
HMAC-SHA256 under the secret over those and the digest of the message carrying it. The master
admits it only when the MAC verifies, the name is its own, the dialed address is its own
advertised address (so a transfer relayed by a third party is refused), the timestamp is within
WINDOW_MS of its clock and the nonce was never used (a captured proof cannot be replayed). The
proof's MAC keys a session: every later message of the exchange, both ways, carries an HMAC
under the session key over its position in the exchange and its content, which the slave
checks before it writes a byte (so a master without the secret cannot feed it) and the master
checks before it counts an acknowledgement.

A broker in controller mode proves every controller heartbeat the same way (exchange
CONTROLLER, the proof naming the member's own name, id and advertised address): the controller
decides who replicates from whom and where a CommitLog is cut, so it listens to no member that
cannot show the secret (`admit_member`). One secret then serves every broker group the
controller manages (the cluster's).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import os
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rmq.broker_server.errors import BrokerError, UserError
from rmq.broker_server.security.nonce_cache import DEFAULT_ACCOUNT_CAPACITY, ReplayGuard
from rmq.v1 import rmq_pb2

SCHEME = b"rmq-cluster-v1"
MIN_SECRET_BYTES = 16
NONCE_BYTES = 16
WINDOW_MS = 60_000   # a proof's timestamp may differ from the master's clock by this much


M = TypeVar("M")


class ProofRefused(BrokerError):
    """A proof or MAC that does not verify; the message says why (it never holds the secret)."""

    def __init__(self, message: str) -> None:
        super().__init__(rmq_pb2.NO_PERMISSION, message)


class Exchange(enum.Enum):
    """What a proof opens; part of what its MAC covers, so one cannot stand for the other."""

    TRANSFER = "transfer"
    SYNCHRONIZE = "synchronize"
    CONTROLLER = "controller"


class Direction(enum.Enum):
    """Who sent a message of a session; part of its MAC, so a message cannot be reflected."""

    FROM_MASTER = "from-master"
    FROM_SLAVE = "from-slave"


def load_cluster_secret(path: Path) -> bytes:
    """The secret in `path` (surrounding whitespace dropped); UserError unless the file is its
    owner's alone and holds at least MIN_SECRET_BYTES."""
    try:
        status = os.stat(path)
        secret = path.read_bytes().strip()
    except OSError as error:
        raise UserError(f"cluster secret file {path}: {error.strerror or error}") from None
    if stat.S_IMODE(status.st_mode) & 0o077:
        raise UserError(f"cluster secret file {path} is readable or writable by other users (mode "
                        f"{stat.S_IMODE(status.st_mode):04o}): run chmod 600 {path}")
    if len(secret) < MIN_SECRET_BYTES:
        raise UserError(f"cluster secret file {path} holds {len(secret)} bytes, fewer than "
                        f"{MIN_SECRET_BYTES} (e.g. `head -c 32 /dev/urandom | base64 > {path}`)")
    return secret


def _digest(message: Any, without: str) -> bytes:
    """SHA-256 of the message's deterministic serialization, field `without` left out."""
    copy = type(message)()
    copy.CopyFrom(message)
    copy.ClearField(without)
    return hashlib.sha256(copy.SerializeToString(deterministic=True)).digest()


def _mac(key: bytes, *parts: bytes) -> bytes:
    """HMAC-SHA256 of the parts, each preceded by its length (no two lists of parts give one input)."""
    text = b"".join(len(part).to_bytes(4, "big") + part for part in (SCHEME, *parts))
    return hmac.new(key, text, hashlib.sha256).digest()


@dataclass
class Session:
    """The MACs of one authenticated exchange after its proof; each direction counts its messages."""

    key: bytes
    sent: int = 0
    received: int = 0

    def _expected(self, direction: Direction, number: int, message: Any) -> bytes:
        return _mac(self.key, direction.value.encode(), str(number).encode(), _digest(message, "mac"))

    def sign(self, direction: Direction, message: Any) -> None:
        message.mac = self._expected(direction, self.sent, message)
        self.sent += 1

    def check(self, direction: Direction, message: Any) -> None:
        """ProofRefused unless `message` is the next one the other side sent in this session."""
        if not hmac.compare_digest(self._expected(direction, self.received, message), message.mac):
            raise ProofRefused(f"message {self.received} of the exchange carries no valid cluster MAC")
        self.received += 1


def signed(session: Session | None, direction: Direction, message: M) -> M:
    """`message` with the session's MAC; as it is when there is no session (no cluster secret)."""
    if session is not None:
        session.sign(direction, message)
    return message


class ClusterAuth:
    def __init__(self, secret: bytes, broker_name: str, clock: Callable[[], float] = time.time) -> None:
        self._secret = secret
        self.broker_name = broker_name
        self._clock = clock
        self._replays = ReplayGuard(WINDOW_MS, DEFAULT_ACCOUNT_CAPACITY, self._now_ms())

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _proof_mac(self, exchange: Exchange, message: Any) -> bytes:
        proof = message.proof
        return _mac(self._secret, exchange.value.encode(), proof.broker_name.encode(),
                    str(proof.broker_id).encode(), proof.master_address.encode(),
                    str(proof.timestamp_ms).encode(), proof.nonce, _digest(message, "proof"))

    def session(self, proof: Any) -> Session:
        """The session a proof opens: its MAC, which only a holder of the secret could make, keys it."""
        return Session(_mac(self._secret, b"session", proof.mac))

    def prove(self, message: Any, exchange: Exchange, broker_id: int, master_address: str) -> Session:
        """Slave: fill `message.proof` (the rest of the message must be final) for the master
        at `master_address`; the session of the exchange it opens."""
        proof = message.proof
        proof.Clear()
        proof.broker_name = self.broker_name
        proof.broker_id = broker_id
        proof.master_address = master_address
        proof.timestamp_ms = self._now_ms()
        proof.nonce = secrets.token_bytes(NONCE_BYTES)
        proof.mac = self._proof_mac(exchange, message)
        return self.session(proof)

    def admit(self, message: Any, exchange: Exchange, own_address: str, own_id: int = 0) -> Session:
        """Master (broker id `own_id`): the session of the exchange `message` opens; ProofRefused
        saying why not. Any other id of the group may be a slave (in controller mode id 0 too)."""
        proof = self._verified(message, exchange, "slave")
        if proof.broker_name != self.broker_name or proof.broker_id < 0 or proof.broker_id == own_id:
            raise ProofRefused(f"the proof is for broker {proof.broker_name[:64]!r} id {proof.broker_id}, "
                               f"not a slave of {self.broker_name!r}")
        if proof.master_address != own_address:
            raise ProofRefused(f"the slave dialed {proof.master_address[:64]!r}, this master is "
                               f"{own_address!r}: refused as relayed (give the slave --master {own_address})")
        self._check_fresh(proof)
        return self.session(proof)

    def admit_member(self, request: Any) -> None:
        """Controller: ProofRefused unless `request` (a ControllerHeartbeatRequest) carries a proof
        made with the secret for the very member it names (broker name, id and address), fresh and
        never used before."""
        proof = self._verified(request, Exchange.CONTROLLER, "broker")
        claimed = (request.broker_name, request.broker_id, request.address)
        if (proof.broker_name, proof.broker_id, proof.master_address) != claimed:
            raise ProofRefused(f"the proof is for broker {proof.broker_name[:64]!r} id {proof.broker_id} at "
                               f"{proof.master_address[:64]!r}, the heartbeat names {claimed[0][:64]!r} id "
                               f"{claimed[1]} at {claimed[2][:64]!r}")
        self._check_fresh(proof)

    def _verified(self, message: Any, exchange: Exchange, who: str) -> Any:
        """The message's proof once its MAC verifies under the secret."""
        if not message.HasField("proof"):
            raise ProofRefused(f"the {who} sent no cluster proof: this side has a cluster secret, give the "
                               f"{who} the same --cluster-secret file")
        proof = message.proof
        if not hmac.compare_digest(self._proof_mac(exchange, message), proof.mac):
            raise ProofRefused(f"the {who}'s cluster proof does not verify: its --cluster-secret differs "
                               f"from this one's")
        return proof

    def _check_fresh(self, proof: Any) -> None:
        now_ms = self._now_ms()
        if abs(now_ms - proof.timestamp_ms) > WINDOW_MS:
            raise ProofRefused(f"the proof is dated {(proof.timestamp_ms - now_ms) / 1000:+.1f} s from this "
                               f"server's clock, outside +-{WINDOW_MS / 1000:g} s")
        if not self._fresh(proof, now_ms):
            raise ProofRefused("the proof was used before (or made before this server started): refused as "
                               "replayed")

    def _fresh(self, proof: Any, now_ms: int) -> bool:
        """The proof's nonce is new and it was made after this process started."""
        if proof.timestamp_ms < self._replays.started_ms or len(proof.nonce) != NONCE_BYTES:
            return False
        member = f"{proof.broker_name}/{proof.broker_id}"
        return self._replays.admit(member, proof.nonce.hex(), proof.timestamp_ms, now_ms)


@dataclass(frozen=True)
class SlaveAuth:
    """A slave's side: it proves itself to `master_address`; no session without a secret."""

    auth: ClusterAuth | None
    broker_id: int
    master_address: str

    def open(self, message: Any, exchange: Exchange) -> Session | None:
        if self.auth is None:
            return None
        return self.auth.prove(message, exchange, self.broker_id, self.master_address)


@dataclass(frozen=True)
class MasterAuth:
    """A master's side, at `own_address`. `required` (the broker runs with --acl): without a
    secret every slave is refused, since anyone could then pose as one."""

    auth: ClusterAuth | None
    own_address: str
    required: bool
    own_id: int = 0

    def admit(self, message: Any, exchange: Exchange) -> Session | None:
        if self.auth is not None:
            return self.auth.admit(message, exchange, self.own_address, self.own_id)
        if self.required:
            raise ProofRefused("this master runs with --acl but without --cluster-secret: give every "
                               "member of the group the same --cluster-secret file")
        return None

    def refusal_session(self, message: Any) -> Session | None:
        """The session a refusal of `message` is signed with: a slave holding the secret then
        reads why it was refused, and nobody else can forge a refusal."""
        if self.auth is None or not message.HasField("proof"):
            return None
        return self.auth.session(message.proof)
