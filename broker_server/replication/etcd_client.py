"""A small asyncio client for etcd's v3 gRPC API (docs/controller.md, "Controller on etcd"), over
the grpcio the broker already uses and the stubs `make proto` generates from proto/rmq/etcd/rpc.proto:
reads, transactions and leases, against several endpoints (the first that answers; the next one
when it stops answering), with TLS and etcd's user/password authentication.

Every call has a deadline: an etcd member that lost its cluster's majority does not answer reads
or writes (they would not be linearizable), and the caller learns that as EtcdUnavailable."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc

from rmq.broker_server.errors import BrokerError, UserError
from rmq.etcd import rpc_pb2, rpc_pb2_grpc
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 2.0
T = TypeVar("T")
# answers that say "this member cannot answer now": the next endpoint is asked
RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN)


class EtcdUnavailable(BrokerError):
    """No endpoint answered (unreachable, or without its cluster's majority); says which and why."""

    def __init__(self, message: str) -> None:
        super().__init__(rmq_pb2.SERVICE_NOT_AVAILABLE, message)


@dataclass(frozen=True)
class EtcdSettings:
    endpoints: tuple[str, ...]
    prefix: str = "/rmq"
    ca_file: str = ""      # TLS: the CA that signed etcd's certificates (TLS on when any TLS file is set)
    cert_file: str = ""    # TLS client certificate and key (etcd's --client-cert-auth)
    key_file: str = ""
    user: str = ""         # etcd authentication (etcd's `auth enable`)
    password_file: str = ""

    @property
    def tls(self) -> bool:
        return bool(self.ca_file or self.cert_file)

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: str) -> bytes | None:
            if not path:
                return None
            try:
                return Path(path).expanduser().read_bytes()
            except OSError as error:
                raise UserError(f"etcd TLS file {path}: {error.strerror or error}") from None

        return grpc.ssl_channel_credentials(read(self.ca_file), read(self.key_file), read(self.cert_file))

    def password(self) -> str:
        try:
            return Path(self.password_file).expanduser().read_text().strip()
        except OSError as error:
            raise UserError(f"etcd password file {self.password_file}: {error.strerror or error}") from None


def key_range(prefix: bytes) -> bytes:
    """The range_end that makes a Range cover every key starting with `prefix`."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


class EtcdClient:
    def __init__(self, settings: EtcdSettings) -> None:
        self.settings = settings
        self._index = 0
        self._channel: grpc.aio.Channel | None = None
        self._token = ""

    @property
    def endpoint(self) -> str:
        return self.settings.endpoints[self._index]

    def _open(self) -> grpc.aio.Channel:
        if self._channel is None:
            address = self.endpoint
            self._channel = (grpc.aio.secure_channel(address, self.settings.credentials())
                             if self.settings.tls else grpc.aio.insecure_channel(address))
        return self._channel

    async def _next_endpoint(self, failed: grpc.aio.Channel) -> None:
        """Leave the endpoint whose channel failed, unless a concurrent call already did (the
        leader's renewals and its decisions share this client)."""
        if self._channel is not failed:
            return
        self._channel = None
        self._token = ""
        self._index = (self._index + 1) % len(self.settings.endpoints)
        await failed.close()

    async def _metadata(self, channel: grpc.aio.Channel) -> tuple[tuple[str, str], ...]:
        if not self.settings.user:
            return ()
        if not self._token:
            answer = await rpc_pb2_grpc.AuthStub(channel).Authenticate(rpc_pb2.AuthenticateRequest(
                name=self.settings.user, password=self.settings.password()), timeout=CALL_TIMEOUT_S)
            self._token = answer.token
        return (("token", self._token),)

    async def _call(self, what: str, call: Callable[[grpc.aio.Channel, tuple[tuple[str, str], ...]],
                                                     Awaitable[T]]) -> T:
        """`call` on the current endpoint, then on each other one; EtcdUnavailable when none answers."""
        reasons: list[str] = []
        for _ in self.settings.endpoints:
            channel = self._open()
            try:
                return await call(channel, await self._metadata(channel))
            except grpc.aio.UsageError:   # a concurrent call closed this channel: open the next one
                reasons.append(f"{self.endpoint}: channel closed")
                continue
            except grpc.aio.AioRpcError as error:
                if error.code() == grpc.StatusCode.UNAUTHENTICATED and self.settings.user:
                    self._token = ""   # expired token: the next attempt authenticates again
                elif error.code() not in (*RETRYABLE, grpc.StatusCode.CANCELLED):
                    raise EtcdUnavailable(f"etcd at {self.endpoint} refused {what}: {error.details()}"
                                          ) from None
                reasons.append(f"{self.endpoint}: {error.details() or error.code().name}")
                await self._next_endpoint(channel)
        raise EtcdUnavailable(f"no etcd endpoint answered {what} ({'; '.join(reasons)})")

    async def get(self, key: bytes) -> rpc_pb2.KeyValue | None:
        answer = await self.range(key)
        return answer.kvs[0] if answer.kvs else None

    async def range(self, key: bytes, range_end: bytes = b"") -> rpc_pb2.RangeResponse:
        request = rpc_pb2.RangeRequest(key=key, range_end=range_end)
        return await self._call("a read", lambda channel, metadata: rpc_pb2_grpc.KVStub(channel).Range(
            request, timeout=CALL_TIMEOUT_S, metadata=metadata))

    async def txn(self, compare: Sequence[rpc_pb2.Compare], success: Sequence[rpc_pb2.RequestOp],
                  failure: Sequence[rpc_pb2.RequestOp] = ()) -> rpc_pb2.TxnResponse:
        request = rpc_pb2.TxnRequest(compare=compare, success=success, failure=failure)
        return await self._call("a transaction", lambda channel, metadata: rpc_pb2_grpc.KVStub(channel).Txn(
            request, timeout=CALL_TIMEOUT_S, metadata=metadata))

    async def grant_lease(self, ttl_s: int) -> int:
        request = rpc_pb2.LeaseGrantRequest(TTL=ttl_s)
        answer = await self._call("a lease", lambda channel, metadata: rpc_pb2_grpc.LeaseStub(
            channel).LeaseGrant(request, timeout=CALL_TIMEOUT_S, metadata=metadata))
        return int(answer.ID)

    async def keep_alive(self, lease: int, timeout_s: float = CALL_TIMEOUT_S) -> int:
        """The lease's remaining TTL in seconds after renewing it (0: it expired); `timeout_s` per
        endpoint."""
        async def renew(channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...]) -> int:
            stream = rpc_pb2_grpc.LeaseStub(channel).LeaseKeepAlive(
                iter([rpc_pb2.LeaseKeepAliveRequest(ID=lease)]), timeout=timeout_s, metadata=metadata)
            async for answer in stream:
                return int(answer.TTL)
            return 0

        return await self._call("a lease renewal", renew)

    async def revoke_lease(self, lease: int) -> None:
        request = rpc_pb2.LeaseRevokeRequest(ID=lease)
        await self._call("a lease revocation", lambda channel, metadata: rpc_pb2_grpc.LeaseStub(
            channel).LeaseRevoke(request, timeout=CALL_TIMEOUT_S, metadata=metadata))

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
            self._channel = None


def put(key: bytes, value: bytes, lease: int = 0) -> rpc_pb2.RequestOp:
    return rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=key, value=value, lease=lease))


def read(key: bytes) -> rpc_pb2.RequestOp:
    return rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=key))


def mod_revision_is(key: bytes, revision: int) -> rpc_pb2.Compare:
    """The key was last written at `revision` (0: it does not exist)."""
    return rpc_pb2.Compare(key=key, target=rpc_pb2.Compare.MOD, result=rpc_pb2.Compare.EQUAL,
                           mod_revision=revision)


def create_revision_is(key: bytes, revision: int) -> rpc_pb2.Compare:
    """The key was created at `revision` (0: it does not exist): who holds a lease-bound key."""
    return rpc_pb2.Compare(key=key, target=rpc_pb2.Compare.CREATE, result=rpc_pb2.Compare.EQUAL,
                           create_revision=revision)
