"""Membership push (RocketMQ NOTIFY_CONSUMER_IDS_CHANGED, spec consumer-startup-allocation-
ordering §3.1.1): a consumer opens one server-streaming `WatchConsumerIds` call per broker;
the broker sends the group's sorted client ids at once and again whenever they change (join,
clean leave, expiry), so the group's consumers rebalance within moments instead of at the
20 s period.

The stream stands for the client's connection: when it ends (the client closed it, or its
process died and the connection dropped) the broker unregisters the client, which is itself
a change the others hear about. Each watch holds one flag, never a queue, and the broker
holds at most `max_watchers` watches, only for clients that heartbeated into the group, one
per group and client id (a new one replaces the old), so no client can make it hold
unbounded state."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from rmq.broker_server.offsets.consumer_manager import ConsumerManager
from rmq.broker_server.status import OK
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _Watch:
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    ended: bool = False   # replaced by a newer watch, or the client expired


class ConsumerIdsWatchService:
    def __init__(self, consumers: ConsumerManager, max_watchers: int) -> None:
        self.consumers = consumers
        self.max_watchers = max_watchers
        self._watches: dict[tuple[str, str], _Watch] = {}   # (group, client id) -> watch
        self._loop: asyncio.AbstractEventLoop | None = None
        consumers.add_listener(self._on_change)

    def watcher_count(self) -> int:
        return len(self._watches)

    async def watch(self, group: str, client_id: str) -> AsyncIterator[rmq_pb2.ConsumerIdsChanged]:
        """The group's client ids now and after every change, until the client goes."""
        self._loop = asyncio.get_running_loop()
        key = (group, client_id)
        if client_id not in self.consumers.consumer_list(group):
            yield rmq_pb2.ConsumerIdsChanged(status=rmq_pb2.Status(
                code=rmq_pb2.ILLEGAL_ARGUMENT,
                message=f"client {client_id} is not a live consumer of group {group}: heartbeat first"))
            return
        previous = self._watches.get(key)
        if previous is None and len(self._watches) >= self.max_watchers:
            yield rmq_pb2.ConsumerIdsChanged(status=rmq_pb2.Status(
                code=rmq_pb2.TOO_MANY_WATCHERS,
                message=f"this broker already holds {self.max_watchers} membership watches"))
            return
        if previous is not None:
            self._end(previous)
        watch = self._watches[key] = _Watch()
        try:
            while not watch.ended:
                watch.changed.clear()
                yield rmq_pb2.ConsumerIdsChanged(status=OK, client_ids=self.consumers.consumer_list(group))
                await watch.changed.wait()
        finally:
            if self._watches.get(key) is watch:
                del self._watches[key]
                # The connection is gone: the client left (cleanly or not).
                self.consumers.unregister(client_id, group)

    def _on_change(self, group: str, removed: list[str]) -> None:
        """ConsumerManager listener (called on the event loop or a store thread)."""
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._notify, group, removed)
        except RuntimeError:   # loop closed during shutdown
            pass

    def _notify(self, group: str, removed: list[str]) -> None:
        for (watched_group, client_id), watch in list(self._watches.items()):
            if watched_group != group:
                continue
            if client_id in removed:
                self._end(watch)   # expired or unregistered: its stream ends
            else:
                watch.changed.set()

    @staticmethod
    def _end(watch: _Watch) -> None:
        watch.ended = True
        watch.changed.set()

    def end_all(self) -> None:
        """Broker shutdown: finish every stream (without unregistering anyone)."""
        watches, self._watches = list(self._watches.values()), {}
        for watch in watches:
            self._end(watch)
