"""Admission of one call: address, signature, time window, replay, permission."""

from __future__ import annotations

import grpc
import pytest

from rmq import request_signing
from rmq.broker_server.acl import parse_acl
from rmq.broker_server.request_auth import CallRefused, RequestAuthenticator, peer_address
from rmq.v1 import rmq_pb2

NOW_S = 1_700_000_000.0
SEND = "/rmq.v1.MessagingService/SendMessage"
PEER = "ipv4:127.0.0.1:40000"
REQUEST = rmq_pb2.SendMessageRequest(topic="orders", messages=[rmq_pb2.Message(body=b"hello")])

ACL = parse_acl({
    "globalWhiteRemoteAddresses": ["127.0.0.1", "10.0.0.0/8"],
    "accounts": [
        {"accessKey": "producer1", "secretKey": "producer-secret", "topicPerms": ["orders=PUB"]},
        {"accessKey": "consumer1", "secretKey": "consumer-secret", "topicPerms": ["orders=SUB"]},
        {"accessKey": "remote01", "secretKey": "remote-secret", "defaultTopicPerm": "PUB",
         "whiteRemoteAddress": "10.9.9.*"},
    ],
}, "test")


@pytest.fixture
def auth() -> RequestAuthenticator:
    return RequestAuthenticator(lambda: ACL, window_s=60, clock=lambda: NOW_S)


def signed(access_key: str = "producer1", secret_key: str = "producer-secret", method: str = SEND,
           request=REQUEST, skew_s: float = 0.0, nonce: str | None = None) -> dict[str, str]:
    headers = request_signing.sign(access_key, secret_key, method, request,
                                   timestamp_ms=int((NOW_S + skew_s) * 1000), nonce=nonce)
    return dict(headers.as_metadata())


def refusal(auth: RequestAuthenticator, metadata: dict, peer: str = PEER, request=REQUEST) -> CallRefused:
    with pytest.raises(CallRefused) as raised:
        auth.admit(SEND, metadata, request, peer)
    return raised.value


def test_a_signed_permitted_call_is_admitted(auth) -> None:
    assert auth.admit(SEND, signed(), REQUEST, PEER) == "producer1"


def test_unsigned_call_is_unauthenticated(auth) -> None:
    refused = refusal(auth, {})
    assert refused.code is grpc.StatusCode.UNAUTHENTICATED
    assert "request is not signed" in refused.message


def test_unknown_access_key_is_unauthenticated(auth) -> None:
    refused = refusal(auth, signed(access_key="stranger"))
    assert refused.code is grpc.StatusCode.UNAUTHENTICATED
    assert refused.message == "unknown access key 'stranger'"


def test_wrong_secret_is_unauthenticated_without_leaking_either_secret(auth) -> None:
    refused = refusal(auth, signed(secret_key="guessed-secret"))
    assert refused.code is grpc.StatusCode.UNAUTHENTICATED
    assert refused.message == "signature mismatch for access key 'producer1' (wrong secret key?)"


def test_request_changed_after_signing_is_refused(auth) -> None:
    other = rmq_pb2.SendMessageRequest(topic="orders", messages=[rmq_pb2.Message(body=b"evil")])
    assert refusal(auth, signed(), request=other).code is grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize("skew_s", [-61.0, 61.0])
def test_timestamps_outside_the_window_are_refused(auth, skew_s: float) -> None:
    refused = refusal(auth, signed(skew_s=skew_s))
    assert refused.code is grpc.StatusCode.UNAUTHENTICATED
    assert f"{skew_s:+.1f} s from the server clock, outside the allowed ±60 s" in refused.message


def test_timestamps_inside_the_window_are_admitted(auth) -> None:
    auth.admit(SEND, signed(skew_s=-59.0), REQUEST, PEER)
    auth.admit(SEND, signed(skew_s=59.0), REQUEST, PEER)


def test_a_replayed_call_is_refused(auth) -> None:
    metadata = signed()
    auth.admit(SEND, metadata, REQUEST, PEER)
    refused = refusal(auth, metadata)
    assert (refused.code, refused.message) == (grpc.StatusCode.UNAUTHENTICATED,
                                               "nonce already used: replayed request refused")


def test_missing_permission_is_permission_denied(auth) -> None:
    refused = refusal(auth, signed("consumer1", "consumer-secret"))
    assert (refused.code, refused.message) == (grpc.StatusCode.PERMISSION_DENIED,
                                               "access key 'consumer1' lacks PUB on topic 'orders'")


def test_addresses_outside_the_global_allow_list_are_denied(auth) -> None:
    refused = refusal(auth, signed(), peer="ipv4:192.0.2.7:5000")
    assert (refused.code, refused.message) == (grpc.StatusCode.PERMISSION_DENIED,
                                               "address 192.0.2.7 is not in globalWhiteRemoteAddresses")


def test_account_white_remote_address(auth) -> None:
    auth.admit(SEND, signed("remote01", "remote-secret"), REQUEST, "ipv4:10.9.9.1:5000")
    refused = refusal(auth, signed("remote01", "remote-secret"), peer="ipv4:10.8.0.1:5000")
    assert refused.code is grpc.StatusCode.PERMISSION_DENIED
    assert refused.message == "access key 'remote01' may not be used from address 10.8.0.1"


def test_reloaded_acl_applies_to_the_next_call() -> None:
    current = {"acl": ACL}
    auth = RequestAuthenticator(lambda: current["acl"], clock=lambda: NOW_S)
    auth.admit(SEND, signed(), REQUEST, PEER)
    current["acl"] = parse_acl({"accounts": [
        {"accessKey": "producer1", "secretKey": "producer-secret", "topicPerms": ["orders=SUB"]}]}, "v2")
    assert refusal(auth, signed()).code is grpc.StatusCode.PERMISSION_DENIED


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        RequestAuthenticator(lambda: ACL, window_s=0)


@pytest.mark.parametrize(("peer", "address"), [
    ("ipv4:127.0.0.1:5000", "127.0.0.1"),
    ("ipv6:[::1]:5000", "::1"),
    ("ipv6:[::ffff:10.0.0.1]:5000", "::ffff:10.0.0.1"),
    ("unix:/tmp/sock", "unix:/tmp/sock"),
])
def test_peer_address(peer: str, address: str) -> None:
    assert peer_address(peer) == address
