"""The deliveries of recent ReceiveMessage calls by attempt id (the proxy's attempt-id replay:
a push consumer retrying a failed receive with the same attempt id gets those deliveries
again instead of leaving them invisible). Bounded in entries and in the record bytes they
hold (BrokerConfig max_remembered_receives / max_remembered_receive_bytes): the oldest are
forgotten first, and a retry of a forgotten one just receives anew."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Protocol, TypeVar


class Sized(Protocol):
    @property
    def size(self) -> int: ...


DeliveryT = TypeVar("DeliveryT", bound=Sized)
Key = tuple[str, str, str]   # (group, topic, attempt id)


class RememberedReceives(Generic[DeliveryT]):
    def __init__(self, max_entries: int, max_bytes: int) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[Key, list[DeliveryT]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: Key) -> list[DeliveryT]:
        return self._entries.get(key, [])

    def put(self, key: Key, deliveries: list[DeliveryT]) -> None:
        self._forget(key)
        self._entries[key] = deliveries
        self.bytes += _bytes(deliveries)
        while self._entries and (len(self._entries) > self.max_entries or self.bytes > self.max_bytes):
            self._forget(next(iter(self._entries)))

    def _forget(self, key: Key) -> None:
        deliveries = self._entries.pop(key, None)
        if deliveries is not None:
            self.bytes -= _bytes(deliveries)


def _bytes(deliveries: list[DeliveryT]) -> int:
    return sum(d.size for d in deliveries)
