"""Request signing: how a client proves it holds an account's secret key without sending it.

Part of the wire contract, like `rmq.message_format`: the client signs and the broker
verifies with this one definition. Every RPC carries four metadata headers:

    x-rmq-access-key   the account (RocketMQ AccessKey)
    x-rmq-timestamp    client clock, epoch milliseconds
    x-rmq-nonce        32 lowercase hex digits, fresh per call
    x-rmq-signature    lowercase hex HMAC-SHA256(secretKey, string-to-sign)

The string-to-sign is six lines joined by "\\n":

    RMQ-HMAC-SHA256
    <access key>
    <gRPC method full name, e.g. /rmq.v1.MessagingService/SendMessage>
    <timestamp>
    <nonce>
    <lowercase hex SHA-256 of the request message, deterministically serialized>

The request is hashed in its deterministic serialization (map entries sorted by key), so
both sides get the same bytes whatever order the sender's map iteration produced. The
broker refuses timestamps outside its window and nonces it has already seen inside that
window, so a captured call cannot be replayed.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

from google.protobuf.message import Message

SCHEME = "RMQ-HMAC-SHA256"
ACCESS_KEY_HEADER = "x-rmq-access-key"
TIMESTAMP_HEADER = "x-rmq-timestamp"
NONCE_HEADER = "x-rmq-nonce"
SIGNATURE_HEADER = "x-rmq-signature"
HEADERS = (ACCESS_KEY_HEADER, TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER)

NONCE_PATTERN = re.compile(r"[0-9a-f]{32}")
SIGNATURE_PATTERN = re.compile(r"[0-9a-f]{64}")
TIMESTAMP_PATTERN = re.compile(r"[0-9]{1,15}")


class SignatureFormatError(ValueError):
    """Signing headers are missing or malformed; the message names the header."""


@dataclass(frozen=True)
class SignedHeaders:
    """The four signing headers of one call, parsed (the signature is not verified here)."""

    access_key: str
    timestamp_ms: int
    nonce: str
    signature: str

    def as_metadata(self) -> tuple[tuple[str, str], ...]:
        return (
            (ACCESS_KEY_HEADER, self.access_key),
            (TIMESTAMP_HEADER, str(self.timestamp_ms)),
            (NONCE_HEADER, self.nonce),
            (SIGNATURE_HEADER, self.signature),
        )


def request_digest(request: Message) -> str:
    """Lowercase hex SHA-256 of the request's deterministic serialization."""
    return hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest()


def string_to_sign(access_key: str, method: str, timestamp_ms: int, nonce: str, digest: str) -> str:
    return "\n".join((SCHEME, access_key, method, str(timestamp_ms), nonce, digest))


def signature(secret_key: str, access_key: str, method: str, timestamp_ms: int, nonce: str,
              digest: str) -> str:
    text = string_to_sign(access_key, method, timestamp_ms, nonce, digest)
    return hmac.new(secret_key.encode(), text.encode(), hashlib.sha256).hexdigest()


def sign(access_key: str, secret_key: str, method: str, request: Message,
         timestamp_ms: int | None = None, nonce: str | None = None) -> SignedHeaders:
    """Sign one call now with a fresh nonce (both overridable, for tests of replay defence)."""
    timestamp_ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    nonce = secrets.token_hex(16) if nonce is None else nonce
    digest = request_digest(request)
    return SignedHeaders(access_key, timestamp_ms, nonce,
                         signature(secret_key, access_key, method, timestamp_ms, nonce, digest))


def parse_headers(metadata: Mapping[str, str]) -> SignedHeaders | None:
    """The signing headers of a call; None when the call carries none of them (unsigned).

    Raises SignatureFormatError when some are present but one is missing or malformed."""
    present = [name for name in HEADERS if name in metadata]
    if not present:
        return None
    missing = [name for name in HEADERS if name not in metadata]
    if missing:
        raise SignatureFormatError(f"signed request lacks metadata {', '.join(missing)}")
    access_key = metadata[ACCESS_KEY_HEADER]
    timestamp = metadata[TIMESTAMP_HEADER]
    nonce = metadata[NONCE_HEADER]
    signature_hex = metadata[SIGNATURE_HEADER]
    if not access_key:
        raise SignatureFormatError(f"{ACCESS_KEY_HEADER} is empty")
    if not TIMESTAMP_PATTERN.fullmatch(timestamp):
        raise SignatureFormatError(f"{TIMESTAMP_HEADER} must be epoch milliseconds, got {timestamp[:32]!r}")
    if not NONCE_PATTERN.fullmatch(nonce):
        raise SignatureFormatError(f"{NONCE_HEADER} must be 32 lowercase hex digits")
    if not SIGNATURE_PATTERN.fullmatch(signature_hex):
        raise SignatureFormatError(f"{SIGNATURE_HEADER} must be 64 lowercase hex digits")
    return SignedHeaders(access_key, int(timestamp), nonce, signature_hex)


def signature_matches(headers: SignedHeaders, secret_key: str, method: str, request: Message) -> bool:
    """Constant-time comparison of the call's signature with the one the secret key gives."""
    expected = signature(secret_key, headers.access_key, method, headers.timestamp_ms, headers.nonce,
                         request_digest(request))
    return hmac.compare_digest(expected, headers.signature)
