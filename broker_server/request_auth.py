"""Admission of one call on a server started with `--acl`: the caller's address, its signature
(rmq.request_signing), the time window, replay, then the permission the RPC needs.

Refusals carry the gRPC status the client sees: UNAUTHENTICATED when the caller is not proven
to be an account, PERMISSION_DENIED when the account (or address) may not make the call.
Messages name the access key and the missing permission, never a secret.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import grpc
from google.protobuf.message import Message

from rmq import request_signing
from rmq.broker_server.acl import AccessDenied, Acl
from rmq.broker_server.nonce_cache import DEFAULT_CAPACITY, NonceCache
from rmq.broker_server.rpc_permissions import check_call

DEFAULT_WINDOW_S = 60


class CallRefused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _unauthenticated(message: str) -> CallRefused:
    return CallRefused(grpc.StatusCode.UNAUTHENTICATED, message)


def _denied(message: str) -> CallRefused:
    return CallRefused(grpc.StatusCode.PERMISSION_DENIED, message)


class RequestAuthenticator:
    def __init__(self, acl: Callable[[], Acl], window_s: float = DEFAULT_WINDOW_S,
                 nonce_capacity: int = DEFAULT_CAPACITY, clock: Callable[[], float] = time.time) -> None:
        """`acl` returns the ACL in force (it may be reloaded between calls)."""
        if window_s <= 0:
            raise ValueError("the signature time window must be positive")
        self._acl = acl
        self.window_ms = int(window_s * 1000)
        self._nonces = NonceCache(self.window_ms, nonce_capacity)
        self._clock = clock

    def admit(self, method: str, metadata: Mapping[str, str], request: Message, peer: str) -> str:
        """The access key of an admitted call; raises CallRefused otherwise."""
        acl = self._acl()
        address = peer_address(peer)
        if not acl.address_allowed(address):
            raise _denied(f"address {address} is not in globalWhiteRemoteAddresses")
        headers = self._signed_headers(metadata)
        account = acl.account(headers.access_key)
        if account is None:
            raise _unauthenticated(f"unknown access key {headers.access_key!r}")
        if not account.may_connect_from(address):
            raise _denied(f"access key {headers.access_key!r} may not be used from address {address}")
        now_ms = int(self._clock() * 1000)
        skew_ms = headers.timestamp_ms - now_ms
        if abs(skew_ms) > self.window_ms:
            raise _unauthenticated(
                f"request timestamp is {skew_ms / 1000:+.1f} s from the server clock, outside the allowed "
                f"±{self.window_ms / 1000:g} s (check the client clock)"
            )
        if not request_signing.signature_matches(headers, account.secret_key, method, request):
            raise _unauthenticated(
                f"signature mismatch for access key {headers.access_key!r} (wrong secret key?)"
            )
        if not self._nonces.admit(headers.nonce, headers.timestamp_ms, now_ms):
            raise _unauthenticated("nonce already used: replayed request refused")
        try:
            check_call(acl, headers.access_key, method, request)
        except AccessDenied as error:
            raise _denied(str(error)) from None
        return headers.access_key

    @staticmethod
    def _signed_headers(metadata: Mapping[str, str]) -> request_signing.SignedHeaders:
        try:
            headers = request_signing.parse_headers(metadata)
        except request_signing.SignatureFormatError as error:
            raise _unauthenticated(str(error)) from None
        if headers is None:
            raise _unauthenticated(
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
