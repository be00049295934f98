"""The signing scheme both sides share (rmq.request_signing)."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from rmq import request_signing as rs
from rmq.v1 import rmq_pb2

METHOD = "/rmq.v1.MessagingService/SendMessage"
TARGET = "broker/broker-a"


def request(**properties: str) -> rmq_pb2.SendMessageRequest:
    message = rmq_pb2.Message(body=b"x", properties=properties)
    return rmq_pb2.SendMessageRequest(topic="orders", messages=[message])


def test_known_vector_pins_the_wire_format() -> None:
    """Any change to the string-to-sign, the hash or the encoding breaks existing clients."""
    headers = rs.sign("user01", "topsecret1", TARGET, METHOD, request(a="1"), timestamp_ms=1_700_000_000_000,
                      nonce="00112233445566778899aabbccddeeff")
    digest = "c7e275d31d3b2e95cf52b633f47168eddf1d9481423b9b84bd013bee70ba89aa"
    assert headers.as_metadata() == (
        ("x-rmq-access-key", "user01"),
        ("x-rmq-target", "broker/broker-a"),
        ("x-rmq-timestamp", "1700000000000"),
        ("x-rmq-nonce", "00112233445566778899aabbccddeeff"),
        ("x-rmq-content-sha256", digest),
        ("x-rmq-signature", "6c4a5d399c8184b6ef76183aa2e784af018be18703b1dc18259052609934dd4f"),
    )
    text = (f"RMQ-HMAC-SHA256-V2\nuser01\nbroker/broker-a\n{METHOD}\n1700000000000\n"
            f"00112233445566778899aabbccddeeff\n{digest}")
    assert hmac.new(b"topsecret1", text.encode(), hashlib.sha256).hexdigest() == headers.signature


def test_string_to_sign_layout() -> None:
    assert rs.string_to_sign("ak", "t", "/m", 5, "n", "d") == "RMQ-HMAC-SHA256-V2\nak\nt\n/m\n5\nn\nd"


def test_server_ids() -> None:
    assert rs.broker_server_id("broker-a", 0) == "broker/broker-a"
    assert rs.broker_server_id("broker-a", 1) == "broker/broker-a/1"   # each member of a group its own
    assert rs.name_server_id("10.0.0.1:9876") == "namesrv/10.0.0.1:9876"


def test_signature_verifies_with_the_secret_only() -> None:
    headers = rs.sign("user01", "topsecret1", TARGET, METHOD, request())
    assert rs.signature_matches(headers, "topsecret1", METHOD)
    assert not rs.signature_matches(headers, "topsecret2", METHOD)


def test_signature_covers_method_target_and_content() -> None:
    headers = rs.sign("user01", "topsecret1", TARGET, METHOD, request())
    assert not rs.signature_matches(headers, "topsecret1", "/rmq.v1.MessagingService/PullMessage")
    for field, value in (("target", "broker/broker-b"), ("content_sha256", "0" * 64)):
        changed = rs.SignedHeaders(**{**headers.__dict__, field: value})
        assert not rs.signature_matches(changed, "topsecret1", METHOD)
    tampered = request()
    tampered.topic = "payments"
    assert rs.content_matches(headers, request())
    assert not rs.content_matches(headers, tampered)


def test_digest_is_independent_of_map_insertion_order() -> None:
    first = request(a="1", b="2", c="3")
    second = request(c="3", a="1", b="2")
    parsed = rmq_pb2.SendMessageRequest.FromString(second.SerializeToString())
    assert rs.request_digest(first) == rs.request_digest(second) == rs.request_digest(parsed)


def test_fresh_nonce_per_call() -> None:
    nonces = {rs.sign("user01", "topsecret1", TARGET, METHOD, request()).nonce for _ in range(3)}
    assert len(nonces) == 3


def test_parse_headers_of_an_unsigned_call_is_none() -> None:
    assert rs.parse_headers({"user-agent": "grpc"}) is None


def test_parse_headers_round_trip() -> None:
    headers = rs.sign("user01", "topsecret1", TARGET, METHOD, request())
    assert rs.parse_headers(dict(headers.as_metadata())) == headers
    unknown_target = rs.sign("user01", "topsecret1", "", METHOD, request())
    assert rs.parse_headers(dict(unknown_target.as_metadata())) == unknown_target


@pytest.mark.parametrize(("change", "message"), [
    ({"x-rmq-signature": None}, "lacks metadata x-rmq-signature"),
    ({"x-rmq-target": None}, "lacks metadata x-rmq-target"),
    ({"x-rmq-timestamp": "soon"}, "x-rmq-timestamp must be epoch milliseconds"),
    ({"x-rmq-nonce": "XYZ"}, "x-rmq-nonce must be 32 lowercase hex digits"),
    ({"x-rmq-signature": "ab"}, "x-rmq-signature must be 64 lowercase hex digits"),
    ({"x-rmq-content-sha256": "AB" * 32}, "x-rmq-content-sha256 must be 64 lowercase hex digits"),
    ({"x-rmq-access-key": ""}, "x-rmq-access-key is empty"),
    ({"x-rmq-access-key": "k" * 129}, "x-rmq-access-key is longer than 128 characters"),
    ({"x-rmq-target": "t" * 257}, "x-rmq-target is longer than 256 characters"),
])
def test_malformed_headers_are_named(change: dict, message: str) -> None:
    metadata = dict(rs.sign("user01", "topsecret1", TARGET, METHOD, request()).as_metadata())
    for name, value in change.items():
        if value is None:
            del metadata[name]
        else:
            metadata[name] = value
    with pytest.raises(rs.SignatureFormatError, match=message) as raised:
        rs.parse_headers(metadata)
    assert "k" * 40 not in str(raised.value)
