"""Consumer group membership (RocketMQ ConsumerManager): clients heartbeat with their group,
message model and subscriptions; a client silent for longer than the expiry
(channelExpiredTimeout, 120 s) is dropped by the periodic scan and no longer listed. Every
change of a group's client list (join, unregister, expiry) is reported to the listeners
(RocketMQ's ConsumerIdsChangeListener), which push it to the group's consumers."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass
class ClientChannelInfo:
    client_id: str
    message_model: int  # rmq.v1 MessageModel
    subscriptions: dict[str, str]  # topic -> sub expression
    last_update_ms: int


class ConsumerManager:
    def __init__(self, client_expiry_ms: int = 120000, clock: Callable[[], float] = time.monotonic) -> None:
        self.client_expiry_ms = client_expiry_ms
        self._clock = clock
        self._groups: dict[str, dict[str, ClientChannelInfo]] = {}
        self._lock = threading.Lock()
        self._listeners: list[Callable[[str, list[str]], None]] = []

    def add_listener(self, listener: Callable[[str, list[str]], None]) -> None:
        """`listener(group, removed_client_ids)` after the group's client list changed."""
        self._listeners.append(listener)

    def _changed(self, group: str, removed: list[str]) -> None:
        for listener in self._listeners:
            listener(group, removed)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def heartbeat(
        self, client_id: str, group: str, message_model: int, subscriptions: dict[str, str]
    ) -> bool:
        """Register or refresh a client; True when the group's membership changed."""
        info = ClientChannelInfo(client_id, message_model, dict(subscriptions), self._now_ms())
        with self._lock:
            clients = self._groups.setdefault(group, {})
            is_new = client_id not in clients or self._expired(clients[client_id])
            clients[client_id] = info
        if is_new:
            log.info("new consumer connected, group: %s, client: %s", group, client_id)
            self._changed(group, [])
        return is_new

    def unregister(self, client_id: str, group: str) -> bool:
        with self._lock:
            clients = self._groups.get(group, {})
            removed = clients.pop(client_id, None) is not None
            if not clients:
                self._groups.pop(group, None)
        if removed:
            log.info("unregister consumer ok, group: %s, client: %s", group, client_id)
            self._changed(group, [client_id])
        return removed

    def consumer_list(self, group: str) -> list[str]:
        """Sorted ids of the group's live clients (expired ones are excluded even before the
        scan removes them, so a departure is visible to the next caller)."""
        with self._lock:
            clients = self._groups.get(group, {})
            return sorted(client_id for client_id, info in clients.items() if not self._expired(info))

    def scan_not_active_channel(self) -> list[tuple[str, str]]:
        """Drop clients past the expiry; returns the (group, client id) pairs removed."""
        removed = []
        with self._lock:
            for group, clients in list(self._groups.items()):
                for client_id, info in list(clients.items()):
                    if self._expired(info):
                        del clients[client_id]
                        removed.append((group, client_id))
                if not clients:
                    del self._groups[group]
        for group, client_id in removed:
            log.warning("consumer channel expired, remove it from group %s: %s", group, client_id)
            self._changed(group, [client_id])
        return removed

    def table_sizes(self) -> tuple[int, int]:
        """(groups, clients) in the table, the expired ones not yet scanned included."""
        with self._lock:
            return len(self._groups), sum(len(clients) for clients in self._groups.values())

    def has_group(self, group: str) -> bool:
        with self._lock:
            return group in self._groups

    def _expired(self, info: ClientChannelInfo) -> bool:
        return self._now_ms() - info.last_update_ms > self.client_expiry_ms
