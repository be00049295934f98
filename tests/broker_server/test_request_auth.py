"""Admission of one call: signature, target server, time window, replay, address, content,
permission and client id owner."""

from __future__ import annotations

import grpc
import pytest

from rmq import request_signing
from rmq.broker_server.security.acl import parse_acl
from rmq.broker_server.security.request_auth import CallRefused, RequestAuthenticator, key_label, peer_address
from rmq.v1 import rmq_pb2

NOW_S = 1_700_000_000.0
SEND = "/rmq.v1.MessagingService/SendMessage"
HEARTBEAT = "/rmq.v1.MessagingService/Heartbeat"
UNREGISTER = "/rmq.v1.MessagingService/UnregisterClient"
PEER = "ipv4:127.0.0.1:40000"
SERVER = "broker/broker-a"
REQUEST = rmq_pb2.SendMessageRequest(topic="orders", messages=[rmq_pb2.Message(body=b"hello")])

ACL = parse_acl({
    "globalWhiteRemoteAddresses": ["127.0.0.1", "10.0.0.0/8"],
    "accounts": [
        {"accessKey": "producer1", "secretKey": "producer-secret", "topicPerms": ["orders=PUB"]},
        {"accessKey": "consumer1", "secretKey": "consumer-secret", "topicPerms": ["orders=SUB"],
         "groupPerms": ["etl=SUB"]},
        {"accessKey": "consumer2", "secretKey": "consumer2-secret", "topicPerms": ["orders=SUB"],
         "groupPerms": ["etl=SUB"]},
        {"accessKey": "remote01", "secretKey": "remote-secret", "defaultTopicPerm": "PUB",
         "whiteRemoteAddress": "10.9.9.*"},
    ],
}, "test")


class Clock:
    def __init__(self) -> None:
        self.now_s = NOW_S

    def __call__(self) -> float:
        return self.now_s


@pytest.fixture
def auth() -> RequestAuthenticator:
    return RequestAuthenticator(lambda: ACL, SERVER, window_s=60, clock=lambda: NOW_S)


def signed(access_key: str = "producer1", secret_key: str = "producer-secret", method: str = SEND,
           request=REQUEST, skew_s: float = 0.0, nonce: str | None = None,
           target: str = SERVER) -> dict[str, str]:
    headers = request_signing.sign(access_key, secret_key, target, method, request,
                                   timestamp_ms=int((NOW_S + skew_s) * 1000), nonce=nonce)
    return dict(headers.as_metadata())


def refusal(auth: RequestAuthenticator, metadata: dict, peer: str = PEER, request=REQUEST,
            method: str = SEND) -> CallRefused:
    with pytest.raises(CallRefused) as raised:
        auth.admit(method, metadata, request, peer)
    return raised.value


def test_a_signed_permitted_call_is_admitted(auth) -> None:
    assert auth.admit(SEND, signed(), REQUEST, PEER) == "producer1"


def test_unsigned_call_is_unauthenticated(auth) -> None:
    refused = refusal(auth, {})
    assert refused.code is grpc.StatusCode.UNAUTHENTICATED
    assert "request is not signed" in refused.message


def test_unknown_key_and_wrong_secret_get_the_same_answer(auth) -> None:
    unknown = refusal(auth, signed(access_key="stranger"))
    wrong = refusal(auth, signed(secret_key="guessed-secret"))
    assert unknown.code is wrong.code is grpc.StatusCode.UNAUTHENTICATED
    suffix = ": unknown access key or wrong secret key"
    assert unknown.message == "signature not accepted for access key 'stranger'" + suffix
    assert wrong.message == "signature not accepted for access key 'producer1'" + suffix


def test_the_metadata_alone_refuses_a_caller_without_the_secret(auth) -> None:
    """admit_metadata needs no request: the server refuses before reading it."""
    with pytest.raises(CallRefused, match="signature not accepted"):
        auth.admit_metadata(SEND, signed(secret_key="guessed-secret"))
    assert auth.admit_metadata(SEND, signed()).access_key == "producer1"


def test_request_changed_after_signing_is_refused(auth) -> None:
    other = rmq_pb2.SendMessageRequest(topic="orders", messages=[rmq_pb2.Message(body=b"evil")])
    refused = refusal(auth, signed(), request=other)
    assert refused.code is grpc.StatusCode.UNAUTHENTICATED
    assert refused.message == "request does not match its x-rmq-content-sha256"


@pytest.mark.parametrize("target", ["broker/broker-b", "namesrv/127.0.0.1:9876", ""])
def test_a_call_signed_for_another_server_is_refused_naming_this_one(auth, target: str) -> None:
    refused = refusal(auth, signed(target=target))
    assert refused.code is grpc.StatusCode.UNAUTHENTICATED
    assert refused.message == f"call signed for server {target!r}, this is 'broker/broker-a'"
    assert refused.trailing_metadata == (("x-rmq-server", "broker/broker-a"),)


@pytest.mark.parametrize(("skew_s", "shown"), [(-61.0, "-61.0"), (5.5, "+5.5"), (59.0, "+59.0")])
def test_timestamps_outside_the_window_are_refused(auth, skew_s: float, shown: str) -> None:
    refused = refusal(auth, signed(skew_s=skew_s))
    assert refused.code is grpc.StatusCode.UNAUTHENTICATED
    assert f"{shown} s from the server clock, outside the allowed -60 s to +5 s" in refused.message


def test_timestamps_inside_the_window_are_admitted() -> None:
    clock = Clock()
    auth = RequestAuthenticator(lambda: ACL, SERVER, window_s=60, clock=clock)
    clock.now_s += 100
    auth.admit(SEND, signed(skew_s=41.0), REQUEST, PEER)    # 59 s old
    auth.admit(SEND, signed(skew_s=104.5), REQUEST, PEER)   # 4.5 s ahead


def test_calls_signed_before_the_server_started_are_refused() -> None:
    """What a previous process accepted cannot be replayed to a restarted one."""
    clock = Clock()
    auth = RequestAuthenticator(lambda: ACL, SERVER, window_s=60, clock=clock)
    clock.now_s += 10
    refused = refusal(auth, signed(skew_s=-1.0))
    assert refused.code is grpc.StatusCode.UNAUTHENTICATED
    assert refused.message == "request signed before this server started: refused as a possible replay"


def test_a_replayed_call_is_refused(auth) -> None:
    metadata = signed()
    auth.admit(SEND, metadata, REQUEST, PEER)
    refused = refusal(auth, metadata)
    assert (refused.code, refused.message) == (grpc.StatusCode.UNAUTHENTICATED,
                                               "nonce already used: replayed request refused")


def test_an_account_without_permissions_cannot_lock_out_others() -> None:
    auth = RequestAuthenticator(lambda: ACL, SERVER, window_s=60, nonce_capacity=10, clock=lambda: NOW_S)
    for _ in range(50):   # no permission: each call is refused, its nonces count against itself only
        with pytest.raises(CallRefused):
            auth.admit(SEND, signed("consumer1", "consumer-secret", skew_s=4.9), REQUEST, PEER)
    auth.admit(SEND, signed(), REQUEST, PEER)


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


def test_a_client_id_belongs_to_the_account_that_registered_it(auth) -> None:
    heartbeat = rmq_pb2.HeartbeatRequest(client_id="c1", consumer_group="etl")
    unregister = rmq_pb2.UnregisterClientRequest(client_id="c1", consumer_group="etl")
    auth.admit(HEARTBEAT, signed("consumer1", "consumer-secret", HEARTBEAT, heartbeat), heartbeat, PEER)
    refused = refusal(auth, signed("consumer2", "consumer2-secret", UNREGISTER, unregister),
                      request=unregister, method=UNREGISTER)
    assert (refused.code, refused.message) == (grpc.StatusCode.PERMISSION_DENIED,
                                               "client id 'c1' is registered by another account")
    auth.admit(UNREGISTER, signed("consumer1", "consumer-secret", UNREGISTER, unregister), unregister, PEER)


def test_reloaded_acl_applies_to_the_next_call() -> None:
    current = {"acl": ACL}
    auth = RequestAuthenticator(lambda: current["acl"], SERVER, clock=lambda: NOW_S)
    auth.admit(SEND, signed(), REQUEST, PEER)
    current["acl"] = parse_acl({"accounts": [
        {"accessKey": "producer1", "secretKey": "producer-secret", "topicPerms": ["orders=SUB"]}]}, "v2")
    assert refusal(auth, signed()).code is grpc.StatusCode.PERMISSION_DENIED


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        RequestAuthenticator(lambda: ACL, SERVER, window_s=0)


def test_key_label_cuts_long_keys() -> None:
    assert key_label("producer1") == "'producer1'"
    assert key_label("k" * 7000) == f"{'k' * 24!r}... (7000 characters)"


@pytest.mark.parametrize(("peer", "address"), [
    ("ipv4:127.0.0.1:5000", "127.0.0.1"),
    ("ipv6:[::1]:5000", "::1"),
    ("ipv6:[::ffff:10.0.0.1]:5000", "::ffff:10.0.0.1"),
    ("unix:/tmp/sock", "unix:/tmp/sock"),
])
def test_peer_address(peer: str, address: str) -> None:
    assert peer_address(peer) == address
