"""ProducerManager (RocketMQ's): the live producers of each producer group, from their heartbeats
(4.x remoting producers' producerDataSet), for `rmq group producers` (mqadmin producerConnection).
A producer is dropped when its connection closes or `expiry_ms` after its last heartbeat (RocketMQ's
scanNotActiveChannel, 120 s); at most `max_groups` groups of at most `max_per_group` producers."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rmq.broker_server.errors import BrokerError
from rmq.v1 import rmq_pb2


@dataclass(frozen=True)
class ProducerInfo:
    client_id: str
    protocol: int          # rmq.v1 ClientProtocol
    address: str
    language: str          # e.g. JAVA, CPP (the client's LanguageCode)
    version: int           # the client's MQVersion ordinal
    last_update_ms: int


class ProducerManager:
    def __init__(self, expiry_ms: int, max_groups: int, max_per_group: int,
                 clock: Callable[[], float] = time.time) -> None:
        self.expiry_ms = expiry_ms
        self.max_groups = max_groups
        self.max_per_group = max_per_group
        self.clock = clock
        self._groups: dict[str, dict[str, ProducerInfo]] = {}
        self._lock = threading.Lock()

    def register(self, group: str, info: ProducerInfo) -> None:
        """Register or refresh a producer (LIMIT_EXCEEDED past the bounds, after expired ones go)."""
        with self._lock:
            self._expire()
            producers = self._groups.get(group)
            if producers is None and len(self._groups) >= self.max_groups:
                raise BrokerError(rmq_pb2.LIMIT_EXCEEDED, f"this broker already tracks {self.max_groups} "
                                                          "producer groups")
            producers = self._groups.setdefault(group, {})
            if info.client_id not in producers and len(producers) >= self.max_per_group:
                raise BrokerError(rmq_pb2.LIMIT_EXCEEDED, f"producer group {group} already has "
                                                          f"{self.max_per_group} producers here")
            producers[info.client_id] = info

    def unregister(self, group: str, client_id: str) -> None:
        with self._lock:
            producers = self._groups.get(group, {})
            producers.pop(client_id, None)
            if not producers:
                self._groups.pop(group, None)

    def connections(self, group: str) -> list[ProducerInfo]:
        """The group's live producers, by client id."""
        with self._lock:
            self._expire()
            return sorted(self._groups.get(group, {}).values(), key=lambda info: info.client_id)

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    def _expire(self) -> None:
        oldest = self.now_ms() - self.expiry_ms
        for group, producers in list(self._groups.items()):
            for client_id, info in list(producers.items()):
                if info.last_update_ms < oldest:
                    del producers[client_id]
            if not producers:
                del self._groups[group]
