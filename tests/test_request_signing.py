"""The signing scheme both sides share (rmq.request_signing)."""

from __future__ import annotations

import pytest

from rmq import request_signing as rs
from rmq.v1 import rmq_pb2

METHOD = "/rmq.v1.MessagingService/SendMessage"


def request(**properties: str) -> rmq_pb2.SendMessageRequest:
    message = rmq_pb2.Message(body=b"x", properties=properties)
    return rmq_pb2.SendMessageRequest(topic="orders", messages=[message])


def test_known_vector_pins_the_wire_format() -> None:
    """Any change to the string-to-sign, the hash or the encoding breaks existing clients."""
    headers = rs.sign("user01", "topsecret1", METHOD, request(a="1"), timestamp_ms=1_700_000_000_000,
                      nonce="00112233445566778899aabbccddeeff")
    assert headers.as_metadata() == (
        ("x-rmq-access-key", "user01"),
        ("x-rmq-timestamp", "1700000000000"),
        ("x-rmq-nonce", "00112233445566778899aabbccddeeff"),
        ("x-rmq-signature", "331a0730613c67b2ad1cc5ecfd88fd272dc7f25974461884bc2e015b4aa83411"),
    )


def test_string_to_sign_layout() -> None:
    assert rs.string_to_sign("ak", "/m", 5, "n", "d") == "RMQ-HMAC-SHA256\nak\n/m\n5\nn\nd"


def test_signature_verifies_with_the_secret_only() -> None:
    headers = rs.sign("user01", "topsecret1", METHOD, request())
    assert rs.signature_matches(headers, "topsecret1", METHOD, request())
    assert not rs.signature_matches(headers, "topsecret2", METHOD, request())


def test_signature_covers_method_and_request() -> None:
    headers = rs.sign("user01", "topsecret1", METHOD, request())
    assert not rs.signature_matches(headers, "topsecret1", "/rmq.v1.MessagingService/PullMessage", request())
    tampered = request()
    tampered.topic = "payments"
    assert not rs.signature_matches(headers, "topsecret1", METHOD, tampered)


def test_digest_is_independent_of_map_insertion_order() -> None:
    first = request(a="1", b="2", c="3")
    second = request(c="3", a="1", b="2")
    parsed = rmq_pb2.SendMessageRequest.FromString(second.SerializeToString())
    assert rs.request_digest(first) == rs.request_digest(second) == rs.request_digest(parsed)


def test_fresh_nonce_per_call() -> None:
    nonces = {rs.sign("user01", "topsecret1", METHOD, request()).nonce for _ in range(3)}
    assert len(nonces) == 3


def test_parse_headers_of_an_unsigned_call_is_none() -> None:
    assert rs.parse_headers({"user-agent": "grpc"}) is None


def test_parse_headers_round_trip() -> None:
    headers = rs.sign("user01", "topsecret1", METHOD, request())
    assert rs.parse_headers(dict(headers.as_metadata())) == headers


@pytest.mark.parametrize(("change", "message"), [
    ({"x-rmq-signature": None}, "lacks metadata x-rmq-signature"),
    ({"x-rmq-timestamp": "soon"}, "x-rmq-timestamp must be epoch milliseconds"),
    ({"x-rmq-nonce": "XYZ"}, "x-rmq-nonce must be 32 lowercase hex digits"),
    ({"x-rmq-signature": "ab"}, "x-rmq-signature must be 64 lowercase hex digits"),
    ({"x-rmq-access-key": ""}, "x-rmq-access-key is empty"),
])
def test_malformed_headers_are_named(change: dict, message: str) -> None:
    metadata = dict(rs.sign("user01", "topsecret1", METHOD, request()).as_metadata())
    for name, value in change.items():
        if value is None:
            del metadata[name]
        else:
            metadata[name] = value
    with pytest.raises(rs.SignatureFormatError, match=message):
        rs.parse_headers(metadata)
