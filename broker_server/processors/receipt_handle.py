"""Receipt handles of popped messages (RocketMQ ExtraInfoUtil / ReceiptHandle): which queue
entry a consumer holds and which generation of its invisibility, so an acknowledgement or a
change of invisibility names exactly one delivery. Text form
`<queue id>:<queue offset>:<generation>:<mac>:<topic>` (topic names hold no ':').

The mac is an HMAC-SHA256 (first 128 bits) of the consumer group and the other fields under a
secret only the broker knows, kept in `<store>/config/receiptHandle.key` (mode 0600, made once),
so handles survive a restart and a client cannot forge one for a message it was not given, nor
turn a superseded handle into the current one (docs/security-model.md: receipt handles)."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from pathlib import Path

from rmq.broker_server.errors import InvalidReceiptHandle
from rmq.store.private_files import write_durably

SECRET_BYTES = 32
MAC_HEX_CHARS = 32


@dataclass(frozen=True)
class ReceiptHandle:
    topic: str
    queue_id: int
    offset: int
    version: int


class ReceiptHandleCodec:
    """Writes and checks the text of receipt handles under the broker's secret."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    @classmethod
    def of_store(cls, store_path: Path) -> ReceiptHandleCodec:
        return cls(load_or_create_secret(store_path / "config" / "receiptHandle.key"))

    def _mac(self, group: str, handle: ReceiptHandle) -> str:
        signed = f"{group}\n{handle.topic}\n{handle.queue_id}\n{handle.offset}\n{handle.version}"
        return hmac.new(self._secret, signed.encode(), hashlib.sha256).hexdigest()[:MAC_HEX_CHARS]

    def encode(self, group: str, handle: ReceiptHandle) -> str:
        """The text a consumer of `group` gets for `handle`."""
        return f"{handle.queue_id}:{handle.offset}:{handle.version}:{self._mac(group, handle)}:{handle.topic}"

    def decode(self, text: str, group: str, topic: str) -> ReceiptHandle:
        """The handle in `text`, which this broker must have issued to `group` for `topic`."""
        parts = text.split(":", 4)
        if len(parts) != 5 or not all(part.isdigit() for part in parts[:3]):
            raise InvalidReceiptHandle(f"receipt handle {text[:100]!r} is malformed")
        if parts[4] != topic:
            raise InvalidReceiptHandle(f"receipt handle {text[:100]!r} is not for topic {topic!r}")
        handle = ReceiptHandle(topic, int(parts[0]), int(parts[1]), int(parts[2]))
        if not hmac.compare_digest(parts[3], self._mac(group, handle)):
            raise InvalidReceiptHandle(f"receipt handle {text[:100]!r} was not issued to group {group!r} "
                                       f"by this broker")
        return handle


def load_or_create_secret(path: Path) -> bytes:
    """The broker's handle secret: read from `path`, or made and stored there (0600, fsynced)."""
    try:
        secret = path.read_bytes()
    except FileNotFoundError:
        return _create_secret(path)
    if len(secret) != SECRET_BYTES:
        raise ValueError(f"{path} holds {len(secret)} bytes, not a {SECRET_BYTES}-byte key: remove it and a "
                         f"new key is made (receipt handles given out before are then refused)")
    return secret


def _create_secret(path: Path) -> bytes:
    secret = secrets.token_bytes(SECRET_BYTES)
    write_durably(path, secret)      # 0600, in a 0700 directory, whole after a crash
    return secret
