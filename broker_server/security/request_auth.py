"""Admission of one call on a server started with `--acl`, in two steps.

`admit_metadata` runs on the call's metadata alone, before the server reads the request
(a grpc.aio interceptor sees neither the request nor the caller's address): the signing
headers (rmq.request_signing), the target server, the time window, the signature and the
account's nonce budget. A caller without an account's secret is refused there, whatever size
of message it sends. `admit_request` then checks the caller's address (globalWhiteRemoteAddresses,
the account's whiteRemoteAddress), that the request read is the one signed, the permission the
RPC needs and the owner of the client id it names.

Refusals carry the gRPC status the client sees: UNAUTHENTICATED when the caller is not proven
to be an account, PERMISSION_DENIED when the account (or address) may not make the call. An
unknown access key and a wrong secret get the same answer, so refusals do not tell which
access keys exist; messages show at most a short prefix of what the caller sent, never a secret.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import grpc
from google.protobuf.message import Message

from rmq import request_signing
from rmq.broker_server.errors import EdgeError
from rmq.broker_server.offsets.client_id_owners import ClientIdOwners, ClientIdTaken
from rmq.broker_server.security.acl import AccessDenied, Account, Acl
from rmq.broker_server.security.caller import Caller
from rmq.broker_server.security.nonce_cache import DEFAULT_ACCOUNT_CAPACITY, ReplayGuard
from rmq.broker_server.security.rpc_permissions import check_call, client_id_of

DEFAULT_WINDOW_S = 60
FUTURE_SKEW_MS = 5_000      # a signature may be dated this far ahead of the server clock, no more
KEY_LABEL_CHARS = 24
_UNKNOWN_SECRET = "no account has this secret: it only keeps the refusal time alike"


class CallRefused(EdgeError):
    def __init__(self, code: grpc.StatusCode, message: str,
                 trailing_metadata: tuple[tuple[str, str], ...] = (), routine: bool = False) -> None:
        """`routine`: an expected step of the protocol (a client asking for the server id), not
        worth a log line."""
        super().__init__(code, message)
        self.trailing_metadata = trailing_metadata
        self.routine = routine


def unauthenticated(message: str) -> CallRefused:
    return CallRefused(grpc.StatusCode.UNAUTHENTICATED, message)


def denied(message: str) -> CallRefused:
    return CallRefused(grpc.StatusCode.PERMISSION_DENIED, message)


def admit_account(acl: Acl, access_key: str, address: str) -> Account:
    """The account of a signed call from `address`, if the ACL lets it call from there (rmq.v1
    and RocketMQ 5 calls alike); raises CallRefused."""
    if not acl.address_allowed(address):
        raise denied(f"address {address} is not in globalWhiteRemoteAddresses")
    account = acl.account(access_key)
    if account is None:   # removed by an ACL reload since the metadata was checked
        raise unauthenticated(f"access key {key_label(access_key)} is no longer in the ACL")
    if not account.may_connect_from(address):
        raise denied(f"access key {key_label(access_key)} may not be used from address {address}")
    return account


def key_label(access_key: str) -> str:
    """The access key as refusals and logs show it: at most KEY_LABEL_CHARS characters."""
    if len(access_key) <= KEY_LABEL_CHARS:
        return repr(access_key)
    return f"{access_key[:KEY_LABEL_CHARS]!r}... ({len(access_key)} characters)"


@dataclass(frozen=True)
class Admission:
    """A call whose metadata passed: its signed headers."""

    headers: request_signing.SignedHeaders

    @property
    def access_key(self) -> str:
        return self.headers.access_key


class RequestAuthenticator:
    def __init__(self, acl: Callable[[], Acl], server_id: str, window_s: float = DEFAULT_WINDOW_S,
                 nonce_capacity: int = DEFAULT_ACCOUNT_CAPACITY, clock: Callable[[], float] = time.time,
                 client_ids: ClientIdOwners | None = None) -> None:
        """`acl` returns the ACL in force (it may be reloaded between calls); `server_id` is the
        target calls to this server are signed for (rmq.request_signing)."""
        if window_s <= 0:
            raise ValueError("the signature time window must be positive")
        self._acl = acl
        self.server_id = server_id
        self.window_ms = int(window_s * 1000)
        self._clock = clock
        self._replays = ReplayGuard(self.window_ms, nonce_capacity, self._now_ms())
        self._client_ids = client_ids or ClientIdOwners()

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def admit_metadata(self, method: str, metadata: Mapping[str, str]) -> Admission:
        """Everything that can be checked before the request is read; raises CallRefused."""
        headers = self._signed_headers(metadata)
        if headers.target != self.server_id:
            raise CallRefused(
                grpc.StatusCode.UNAUTHENTICATED,
                f"call signed for server {headers.target[:64]!r}, this is {self.server_id!r}",
                ((request_signing.SERVER_HEADER, self.server_id),),
                routine=not headers.target,
            )
        now_ms = self._now_ms()
        self._check_time(headers.timestamp_ms, now_ms)
        account = self._acl().account(headers.access_key)
        secret = account.secret_key if account is not None else _UNKNOWN_SECRET
        if not request_signing.signature_matches(headers, secret, method) or account is None:
            raise unauthenticated(f"signature not accepted for access key {key_label(headers.access_key)}: "
                                   f"unknown access key or wrong secret key")
        if not self._replays.admit(headers.access_key, headers.nonce, headers.timestamp_ms, now_ms):
            raise unauthenticated("nonce already used: replayed request refused")
        return Admission(headers)

    def admit_request(self, admission: Admission, method: str, request: Message, peer: str) -> None:
        """The caller's address is allowed, the request read matches its signature, the account
        holds the permission the call needs and owns the client id it names; raises CallRefused."""
        acl = self._acl()
        admit_account(acl, admission.access_key, peer_address(peer))
        if not request_signing.content_matches(admission.headers, request):
            raise unauthenticated(f"request does not match its {request_signing.CONTENT_SHA256_HEADER}")
        try:
            check_call(acl, admission.access_key, method, request)
            client_id = client_id_of(method, request)
            if client_id:
                self._client_ids.claim(admission.access_key, client_id, self._now_ms())
        except (AccessDenied, ClientIdTaken) as error:
            raise denied(str(error)) from None

    def caller(self, access_key: str) -> Caller:
        """The account an admitted call runs as (rmq.broker_server.security.caller)."""
        return Caller(access_key, self._acl)

    def admit(self, method: str, metadata: Mapping[str, str], request: Message, peer: str) -> str:
        """Both steps; the access key of an admitted call."""
        admission = self.admit_metadata(method, metadata)
        self.admit_request(admission, method, request, peer)
        return admission.access_key

    def _check_time(self, timestamp_ms: int, now_ms: int) -> None:
        skew_ms = timestamp_ms - now_ms
        if skew_ms < -self.window_ms or skew_ms > FUTURE_SKEW_MS:
            raise unauthenticated(
                f"request timestamp is {skew_ms / 1000:+.1f} s from the server clock, outside the allowed "
                f"-{self.window_ms / 1000:g} s to +{FUTURE_SKEW_MS / 1000:g} s (check the client clock)"
            )
        if timestamp_ms < self._replays.started_ms:
            raise unauthenticated("request signed before this server started: refused as a possible replay")

    @staticmethod
    def _signed_headers(metadata: Mapping[str, str]) -> request_signing.SignedHeaders:
        try:
            headers = request_signing.parse_headers(metadata)
        except request_signing.SignatureFormatError as error:
            raise unauthenticated(str(error)) from None
        if headers is None:
            raise unauthenticated(
                "request is not signed: this server requires an access key and secret key "
                "(client options accessKey/secretKey, or RMQ_ACCESS_KEY/RMQ_SECRET_KEY for the CLI)"
            )
        return headers


def peer_address(peer: str) -> str:
    """The IP of a gRPC peer string: `ipv4:1.2.3.4:5`, `ipv6:[::1]:5`; other forms as given."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    return peer
