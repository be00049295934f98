"""rmq's request signing (rmq.request_signing, scheme RMQ-HMAC-SHA256-V2) carried by a
RemotingCommand (docs/remoting-protocol.md, "rmq signing"): the SDK's calls over the remoting
port are signed as its gRPC calls are, with a target server, a timestamp and a fresh nonce, so
the broker refuses a replay (RocketMQ 4's own AccessKey/Signature signs neither).

The six x-rmq-* names travel as extFields. The method signed is `/rmq.remoting/<request
code>`; the content digest is the SHA-256 of every other extFields entry, by sorted name, each
written `name NUL value NUL`, then the body. A request signed for another server is refused (NO_PERMISSION)
with this server's id in the answer's extFields (`x-rmq-server`): the client signs for it from
then on, as a gRPC client learns it from the refusal's trailer."""

from __future__ import annotations

import hashlib

from rmq import request_signing
from rmq.remoting.remoting_command import RemotingCommand

METHOD_PREFIX = "/rmq.remoting/"
SIGNING_FIELDS = frozenset(request_signing.HEADERS)
SERVER_FIELD = request_signing.SERVER_HEADER   # extFields of a refusal for another server: this one's id


def method(code: int) -> str:
    return f"{METHOD_PREFIX}{code}"


def content_sha256(command: RemotingCommand) -> str:
    digest = hashlib.sha256()
    for name, value in sorted(command.ext_fields.items()):
        if name not in SIGNING_FIELDS:
            digest.update(f"{name}\0{value}\0".encode())
    digest.update(command.body)
    return digest.hexdigest()


def is_signed(command: RemotingCommand) -> bool:
    return request_signing.SIGNATURE_HEADER in command.ext_fields


def sign(command: RemotingCommand, access_key: str, secret_key: str, target: str) -> RemotingCommand:
    """`command` with the signing fields for server `target` added (now, a fresh nonce)."""
    digest = content_sha256(command)
    timestamp_ms, nonce = request_signing.fresh()
    headers = request_signing.SignedHeaders(
        access_key, target, timestamp_ms, nonce, digest,
        request_signing.signature(secret_key, access_key, target, method(command.code), timestamp_ms, nonce,
                                  digest))
    command.ext_fields.update(headers.as_metadata())
    return command
