"""Consumer group membership (RocketMQ ConsumerManager): clients heartbeat with their group,
message model and subscriptions; a client silent for longer than the expiry
(channelExpiredTimeout, 120 s) is dropped by the periodic scan and no longer listed. Every
change of a group's client list (join, unregister, expiry) is reported to the listeners
(RocketMQ's ConsumerIdsChangeListener), which push it to the group's consumers.

Every protocol's consumers are in this one table. RocketMQ 5 clients join with their Telemetry
settings and leave when their stream ends (the stream is their heartbeat: they never expire here),
and the broker assigns their queues (pop): they are members of their group (connections, group
lists) but not in `consumer_list`, the list rmq.v1 and 4.x consumers rebalance by, and their
comings and goings are not pushed to those consumers. In RocketMQ a group is one protocol's
clients in practice; a group mixing them keeps its rmq.v1 / 4.x consumers' queues to themselves.

The table is bounded (`ConsumerTableLimits`, BrokerConfig max_consumer_groups,
max_clients_per_group, max_consumer_clients, max_subscriptions_per_client,
max_subscription_bytes): a heartbeat that would pass a bound is refused with LIMIT_EXCEEDED
naming the setting, and the table is left as it was. Clients already in the table keep
refreshing whatever the bounds."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rmq.broker_server.errors import BrokerError
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)


@dataclass
class ClientChannelInfo:
    client_id: str
    message_model: int  # rmq.v1 MessageModel
    subscriptions: dict[str, str]  # topic -> sub expression
    last_update_ms: int
    protocol: int = rmq_pb2.CLIENT_PROTOCOL_RMQ   # rmq.v1 ClientProtocol: how it reached the broker
    address: str = ""                              # the client's address as the broker sees it

    @property
    def broker_assigned(self) -> bool:
        """A RocketMQ 5 client: held by its Telemetry stream, its queues assigned by the broker."""
        return self.protocol == rmq_pb2.CLIENT_PROTOCOL_ROCKETMQ_V2

    @property
    def subscription_bytes(self) -> int:
        """What the subscription table costs, counted as its characters."""
        return sum(len(topic) + len(expression) for topic, expression in self.subscriptions.items())


@dataclass(frozen=True)
class ConsumerTableLimits:
    max_groups: int = 4096
    max_clients_per_group: int = 1024
    max_clients: int = 16384
    max_subscriptions_per_client: int = 1024
    max_subscription_bytes: int = 64 * 1024 * 1024   # over every client's subscriptions


def limit_exceeded(message: str) -> BrokerError:
    return BrokerError(rmq_pb2.LIMIT_EXCEEDED, message)


class ConsumerManager:
    def __init__(self, client_expiry_ms: int = 120000, clock: Callable[[], float] = time.monotonic,
                 limits: ConsumerTableLimits = ConsumerTableLimits()) -> None:
        self.client_expiry_ms = client_expiry_ms
        self.limits = limits
        self._clock = clock
        self._groups: dict[str, dict[str, ClientChannelInfo]] = {}
        self._clients = 0
        self._subscription_bytes = 0
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
        self, client_id: str, group: str, message_model: int, subscriptions: dict[str, str],
        protocol: int = rmq_pb2.CLIENT_PROTOCOL_RMQ, address: str = "",
    ) -> bool:
        """Register or refresh a client; True when the group's membership changed.
        BrokerError LIMIT_EXCEEDED when the table's bounds do not admit it."""
        if len(subscriptions) > self.limits.max_subscriptions_per_client:
            raise limit_exceeded(f"{len(subscriptions)} subscriptions in one heartbeat: at most "
                                 f"{self.limits.max_subscriptions_per_client} (max_subscriptions_per_client)")
        info = ClientChannelInfo(client_id, message_model, dict(subscriptions), self._now_ms(),
                                 protocol, address)
        with self._lock:
            clients = self._groups.get(group)
            previous = clients.get(client_id) if clients is not None else None
            self._admit(group, clients, previous, info)
            if clients is None:
                clients = self._groups[group] = {}
            is_new = previous is None or self._expired(previous)
            clients[client_id] = info
            self._clients += previous is None
            self._subscription_bytes += info.subscription_bytes
            if previous is not None:
                self._subscription_bytes -= previous.subscription_bytes
        if is_new:
            log.info("new consumer connected, group: %s, client: %s", group, client_id)
            if not info.broker_assigned:
                self._changed(group, [])
        return is_new

    def unregister(self, client_id: str, group: str) -> bool:
        with self._lock:
            clients = self._groups.get(group, {})
            info = clients.pop(client_id, None)
            if info is not None:
                self._forget(info)
            if not clients:
                self._groups.pop(group, None)
        if info is None:
            return False
        log.info("unregister consumer ok, group: %s, client: %s", group, client_id)
        if not info.broker_assigned:
            self._changed(group, [client_id])
        return True

    def consumer_list(self, group: str) -> list[str]:
        """Sorted ids of the group's live clients that rebalance themselves (expired ones are
        excluded even before the scan removes them, so a departure is visible to the next caller;
        broker-assigned RocketMQ 5 clients are not theirs to share queues with)."""
        with self._lock:
            clients = self._groups.get(group, {})
            return sorted(client_id for client_id, info in clients.items()
                          if not self._expired(info) and not info.broker_assigned)

    def connections(self, group: str) -> list[ClientChannelInfo]:
        """The group's live clients, sorted by id (getConsumerConnectionList)."""
        with self._lock:
            clients = self._groups.get(group, {})
            return sorted((info for info in clients.values() if not self._expired(info)),
                          key=lambda info: info.client_id)
    def subscription(self, group: str, topic: str) -> str | None:
        """The sub expression a live client of `group` last heartbeated for `topic`."""
        with self._lock:
            for info in self._groups.get(group, {}).values():
                if topic in info.subscriptions and not self._expired(info):
                    return info.subscriptions[topic]
        return None

    def scan_not_active_channel(self) -> list[tuple[str, str]]:
        """Drop clients past the expiry; returns the (group, client id) pairs removed."""
        removed = []
        with self._lock:
            for group, clients in list(self._groups.items()):
                for client_id, info in list(clients.items()):
                    if self._expired(info):
                        del clients[client_id]
                        self._forget(info)
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
            return len(self._groups), self._clients

    def subscription_bytes(self) -> int:
        with self._lock:
            return self._subscription_bytes

    def admits_group(self, group: str) -> bool:
        """Whether a heartbeat of `group` may join (the group is known or there is room)."""
        with self._lock:
            return group in self._groups or len(self._groups) < self.limits.max_groups

    def group_names(self) -> set[str]:
        """The groups with clients in the table."""
        with self._lock:
            return set(self._groups)

    def has_group(self, group: str) -> bool:
        with self._lock:
            return group in self._groups

    def _admit(self, group: str, clients: dict[str, ClientChannelInfo] | None,
               previous: ClientChannelInfo | None, info: ClientChannelInfo) -> None:
        """Refuse (LIMIT_EXCEEDED) a heartbeat that would pass a bound (under the lock)."""
        limits = self.limits
        if clients is None and len(self._groups) >= limits.max_groups:
            raise limit_exceeded(f"this broker already has {limits.max_groups} consumer groups "
                                 f"(max_consumer_groups): group {group!r} is refused")
        if previous is None and clients is not None and len(clients) >= limits.max_clients_per_group:
            raise limit_exceeded(f"group {group!r} already has {limits.max_clients_per_group} clients "
                                 f"(max_clients_per_group)")
        if previous is None and self._clients >= limits.max_clients:
            raise limit_exceeded(f"this broker already has {limits.max_clients} consumer clients "
                                 f"(max_consumer_clients)")
        growth = info.subscription_bytes - (previous.subscription_bytes if previous else 0)
        if growth > 0 and self._subscription_bytes + growth > limits.max_subscription_bytes:
            raise limit_exceeded(f"consumer subscriptions already take {self._subscription_bytes} of "
                                 f"{limits.max_subscription_bytes} bytes (max_subscription_bytes)")

    def _forget(self, info: ClientChannelInfo) -> None:
        self._clients -= 1
        self._subscription_bytes -= info.subscription_bytes

    def _expired(self, info: ClientChannelInfo) -> bool:
        return not info.broker_assigned and self._now_ms() - info.last_update_ms > self.client_expiry_ms
