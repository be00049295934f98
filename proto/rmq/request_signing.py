"""Request signing: how a client proves it holds an account's secret key without sending it.

Part of the wire contract, like `rmq.message_format`: the client signs and the server
verifies with this one definition. Every RPC carries six metadata headers:

    x-rmq-access-key      the account (RocketMQ AccessKey), at most 128 characters
    x-rmq-target          the server the call is for (`server_id` below; empty: unknown yet)
    x-rmq-timestamp       client clock, epoch milliseconds
    x-rmq-nonce           32 lowercase hex digits, fresh per call
    x-rmq-content-sha256  lowercase hex SHA-256 of the request message, deterministically serialized
    x-rmq-signature       lowercase hex HMAC-SHA256(secretKey, string-to-sign)

The string-to-sign is seven lines joined by "\\n":

    RMQ-HMAC-SHA256-V2
    <access key>
    <target>
    <gRPC method full name, e.g. /rmq.v1.MessagingService/SendMessage>
    <timestamp>
    <nonce>
    <content sha256>

Every input of the signature travels in the metadata, so a server checks the signature
before it reads the request: a caller who does not hold the secret is refused without the
server receiving its message. The server then checks that the request it reads hashes to
x-rmq-content-sha256. The request is hashed in its deterministic serialization (map entries
sorted by key), so both sides get the same bytes whatever order the sender's map iteration
produced.

A client-streaming call (a slave's replication stream) signs the digest of the empty message
(STREAM_REQUEST): the server admits the stream once, when it opens; its messages are not
covered one by one.

The target names one server, so a call captured on its way to one server is refused by
every other: a broker group's master is `broker/<broker name>`, each of its slaves
`broker/<broker name>/<broker id>` (so a call signed for one member of a group is refused by
the others), a name server `namesrv/<listen address>`.
A client learns it from the server: a call signed for another target (or for the empty one)
is refused with UNAUTHENTICATED and the server's own id in the trailing metadata
`x-rmq-server`; the client signs for that id from then on. The server also refuses nonces it
has already seen and timestamps outside its window, so a captured call cannot be replayed.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

from google.protobuf import empty_pb2
from google.protobuf.message import Message

SCHEME = "RMQ-HMAC-SHA256-V2"
ACCESS_KEY_HEADER = "x-rmq-access-key"
TARGET_HEADER = "x-rmq-target"
TIMESTAMP_HEADER = "x-rmq-timestamp"
NONCE_HEADER = "x-rmq-nonce"
CONTENT_SHA256_HEADER = "x-rmq-content-sha256"
SIGNATURE_HEADER = "x-rmq-signature"
HEADERS = (ACCESS_KEY_HEADER, TARGET_HEADER, TIMESTAMP_HEADER, NONCE_HEADER, CONTENT_SHA256_HEADER,
           SIGNATURE_HEADER)
STREAM_REQUEST = empty_pb2.Empty()   # what a client-streaming call signs in place of its messages
SERVER_HEADER = "x-rmq-server"   # trailing metadata of a refusal: the target this server signs for

MAX_ACCESS_KEY_LENGTH = 128
MAX_TARGET_LENGTH = 256
NONCE_PATTERN = re.compile(r"[0-9a-f]{32}")
HEX_SHA256_PATTERN = re.compile(r"[0-9a-f]{64}")
TIMESTAMP_PATTERN = re.compile(r"[0-9]{1,15}")


class SignatureFormatError(ValueError):
    """Signing headers are missing or malformed; the message names the header."""


def broker_server_id(broker_name: str, broker_id: int) -> str:
    """The id of one member of a broker group: the master (broker id 0) is the group's name."""
    return f"broker/{broker_name}" if broker_id == 0 else f"broker/{broker_name}/{broker_id}"


def name_server_id(listen: str) -> str:
    return f"namesrv/{listen}"


@dataclass(frozen=True)
class SignedHeaders:
    """The signing headers of one call, parsed (neither the signature nor the digest verified)."""

    access_key: str
    target: str
    timestamp_ms: int
    nonce: str
    content_sha256: str
    signature: str

    def as_metadata(self) -> tuple[tuple[str, str], ...]:
        return (
            (ACCESS_KEY_HEADER, self.access_key),
            (TARGET_HEADER, self.target),
            (TIMESTAMP_HEADER, str(self.timestamp_ms)),
            (NONCE_HEADER, self.nonce),
            (CONTENT_SHA256_HEADER, self.content_sha256),
            (SIGNATURE_HEADER, self.signature),
        )


def request_digest(request: Message) -> str:
    """Lowercase hex SHA-256 of the request's deterministic serialization."""
    return hashlib.sha256(request.SerializeToString(deterministic=True)).hexdigest()


def string_to_sign(access_key: str, target: str, method: str, timestamp_ms: int, nonce: str,
                   content_sha256: str) -> str:
    return "\n".join((SCHEME, access_key, target, method, str(timestamp_ms), nonce, content_sha256))


def signature(secret_key: str, access_key: str, target: str, method: str, timestamp_ms: int, nonce: str,
              content_sha256: str) -> str:
    text = string_to_sign(access_key, target, method, timestamp_ms, nonce, content_sha256)
    return hmac.new(secret_key.encode(), text.encode(), hashlib.sha256).hexdigest()


def fresh() -> tuple[int, str]:
    """A signature's timestamp (now, epoch ms) and a fresh nonce."""
    return int(time.time() * 1000), secrets.token_hex(16)


def sign(access_key: str, secret_key: str, target: str, method: str, request: Message,
         timestamp_ms: int | None = None, nonce: str | None = None) -> SignedHeaders:
    """Sign one call for server `target` now with a fresh nonce (both overridable, for tests
    of the replay defence)."""
    now_ms, fresh_nonce = fresh()
    timestamp_ms = now_ms if timestamp_ms is None else timestamp_ms
    nonce = fresh_nonce if nonce is None else nonce
    digest = request_digest(request)
    return SignedHeaders(access_key, target, timestamp_ms, nonce, digest,
                         signature(secret_key, access_key, target, method, timestamp_ms, nonce, digest))


def parse_headers(metadata: Mapping[str, str]) -> SignedHeaders | None:
    """The signing headers of a call; None when the call carries none of them (unsigned).

    Raises SignatureFormatError when some are present but one is missing or malformed; the
    message never repeats more than a short prefix of what the caller sent."""
    present = [name for name in HEADERS if name in metadata]
    if not present:
        return None
    missing = [name for name in HEADERS if name not in metadata]
    if missing:
        raise SignatureFormatError(f"signed request lacks metadata {', '.join(missing)}")
    access_key = metadata[ACCESS_KEY_HEADER]
    target = metadata[TARGET_HEADER]
    timestamp = metadata[TIMESTAMP_HEADER]
    if not access_key:
        raise SignatureFormatError(f"{ACCESS_KEY_HEADER} is empty")
    if len(access_key) > MAX_ACCESS_KEY_LENGTH:
        raise SignatureFormatError(f"{ACCESS_KEY_HEADER} is longer than {MAX_ACCESS_KEY_LENGTH} characters")
    if len(target) > MAX_TARGET_LENGTH:
        raise SignatureFormatError(f"{TARGET_HEADER} is longer than {MAX_TARGET_LENGTH} characters")
    if not TIMESTAMP_PATTERN.fullmatch(timestamp):
        raise SignatureFormatError(f"{TIMESTAMP_HEADER} must be epoch milliseconds, got {timestamp[:32]!r}")
    if not NONCE_PATTERN.fullmatch(metadata[NONCE_HEADER]):
        raise SignatureFormatError(f"{NONCE_HEADER} must be 32 lowercase hex digits")
    for name in (CONTENT_SHA256_HEADER, SIGNATURE_HEADER):
        if not HEX_SHA256_PATTERN.fullmatch(metadata[name]):
            raise SignatureFormatError(f"{name} must be 64 lowercase hex digits")
    return SignedHeaders(access_key, target, int(timestamp), metadata[NONCE_HEADER],
                         metadata[CONTENT_SHA256_HEADER], metadata[SIGNATURE_HEADER])


def signature_matches(headers: SignedHeaders, secret_key: str, method: str) -> bool:
    """Constant-time comparison of the call's signature with the one the secret key gives
    (metadata only: the request itself is checked by `content_matches`)."""
    expected = signature(secret_key, headers.access_key, headers.target, method, headers.timestamp_ms,
                         headers.nonce, headers.content_sha256)
    return hmac.compare_digest(expected, headers.signature)


def content_matches(headers: SignedHeaders, request: Message) -> bool:
    """The request read is the one that was signed."""
    return hmac.compare_digest(request_digest(request), headers.content_sha256)
