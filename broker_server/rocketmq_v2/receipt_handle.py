"""Receipt handles of popped messages (RocketMQ ExtraInfoUtil / ReceiptHandle): which queue
entry a consumer holds and which generation of its invisibility, so an acknowledgement or a
change of invisibility names exactly one delivery. Text form
`<queue id>:<queue offset>:<generation>:<topic>` (topic names hold no ':')."""

from __future__ import annotations

from dataclasses import dataclass


class InvalidReceiptHandle(ValueError):
    """A handle this broker did not issue (malformed, or for another topic)."""


@dataclass(frozen=True)
class ReceiptHandle:
    topic: str
    queue_id: int
    offset: int
    version: int

    def encode(self) -> str:
        return f"{self.queue_id}:{self.offset}:{self.version}:{self.topic}"

    @classmethod
    def decode(cls, text: str, topic: str) -> ReceiptHandle:
        """The handle in `text`, which must name `topic` (the request's)."""
        parts = text.split(":", 3)
        if len(parts) != 4 or not all(part.isdigit() for part in parts[:3]):
            raise InvalidReceiptHandle(f"receipt handle {text!r} is malformed")
        if parts[3] != topic:
            raise InvalidReceiptHandle(f"receipt handle {text!r} is not for topic {topic!r}")
        return cls(parts[3], int(parts[0]), int(parts[1]), int(parts[2]))
