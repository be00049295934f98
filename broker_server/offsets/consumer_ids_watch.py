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
unbounded state.

The same stream carries RocketMQ's RESET_CONSUMER_CLIENT_OFFSET to rmq.v1 consumers
(`notify_reset`): an admin's offset reset is sent to every watching client of the group as one
event, so a running consumer drops what it cached and reads on from the reset offsets instead of
committing its own over them. A watch holds at most one pending reset (a later one of the same
queue replaces the earlier), bounded by the topics' queues. And RocketMQ's GET_CONSUMER_RUNNING_INFO:
`ask_running_info` puts a question id on the client's stream and waits (RUNNING_INFO_TIMEOUT_S) for
its ReportRunningInfo (`answer_running_info`); a client has at most one question open, which every
concurrent asker shares."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from rmq.broker_server.errors import BrokerError, illegal_argument
from rmq.broker_server.offsets.consumer_manager import ConsumerManager
from rmq.broker_server.offsets.consumer_offset_manager import OffsetKey
from rmq.broker_server.status import OK
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)
RUNNING_INFO_TIMEOUT_S = 5.0


@dataclass(eq=False)
class _Watch:
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    ended: bool = False   # replaced by a newer watch, or the client expired
    adopts_resets: bool = False
    members_changed: bool = True
    resets: dict[tuple[str, int], int] = field(default_factory=dict)   # (topic, queue id) -> offset
    info_request: str = ""                                   # the open running-info question's id
    info_asked: bool = False                                 # ... sent on the stream
    info: asyncio.Future[rmq_pb2.ConsumerRunningInfo] | None = None


class ConsumerIdsWatchService:
    def __init__(self, consumers: ConsumerManager, max_watchers: int) -> None:
        self.consumers = consumers
        self.max_watchers = max_watchers
        self._watches: dict[tuple[str, str], _Watch] = {}   # (group, client id) -> watch
        self._loop: asyncio.AbstractEventLoop | None = None
        consumers.add_listener(self._on_change)

    def watcher_count(self) -> int:
        return len(self._watches)

    async def watch(self, group: str, client_id: str, adopts_resets: bool = False
                    ) -> AsyncIterator[rmq_pb2.ConsumerIdsChanged]:
        """The group's client ids now and after every change, until the client goes; and the
        group's offset resets when the client `adopts_resets`."""
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
        watch = self._watches[key] = _Watch(adopts_resets=adopts_resets)
        try:
            while not watch.ended:
                watch.changed.clear()
                for event in self._pending_events(watch, group):
                    yield event
                await watch.changed.wait()
        finally:
            if self._watches.get(key) is watch:
                del self._watches[key]
                # The connection is gone: the client left (cleanly or not).
                self.consumers.unregister(client_id, group)

    def _pending_events(self, watch: _Watch, group: str) -> list[rmq_pb2.ConsumerIdsChanged]:
        events = []
        if watch.resets:
            resets, watch.resets = watch.resets, {}
            events.append(rmq_pb2.ConsumerIdsChanged(status=OK, reset_offsets=[
                rmq_pb2.ConsumerOffset(topic=topic, queue_id=queue_id, offset=offset)
                for (topic, queue_id), offset in sorted(resets.items())]))
        if watch.info_request and not watch.info_asked:
            watch.info_asked = True
            events.append(rmq_pb2.ConsumerIdsChanged(status=OK, running_info_request=watch.info_request))
        if watch.members_changed:
            watch.members_changed = False
            members = self.consumers.consumer_list(group)
            events.append(rmq_pb2.ConsumerIdsChanged(status=OK, client_ids=members))
        return events

    def watching(self, group: str) -> set[str]:
        return {client_id for (watched, client_id), watch in self._watches.items()
                if watched == group and watch.adopts_resets and not watch.ended}

    def notify_reset(self, group: str, offsets: dict[OffsetKey, int]) -> list[str]:
        """Tell every watching client of `group` (on the event loop) that its offsets were reset
        to `offsets`; returns their client ids."""
        notified = []
        for (watched_group, client_id), watch in self._watches.items():
            if watched_group == group and watch.adopts_resets and not watch.ended:
                watch.resets.update(((key.topic, key.queue_id), offset) for key, offset in offsets.items())
                watch.changed.set()
                notified.append(client_id)
        return sorted(notified)

    async def ask_running_info(self, group: str, client_id: str) -> rmq_pb2.ConsumerRunningInfo:
        """The client's answer to a running-info question put on its stream (the open one, if any)."""
        watch = self._watches.get((group, client_id))
        if watch is None or watch.ended:
            raise BrokerError(rmq_pb2.SYSTEM_ERROR, f"The Consumer <{group}> <{client_id}> not online (no "
                                                    "membership watch on this broker)")
        if watch.info is None:
            watch.info = asyncio.get_running_loop().create_future()
            watch.info_request, watch.info_asked = uuid.uuid4().hex, False
            watch.changed.set()
        question = watch.info
        try:
            return await asyncio.wait_for(asyncio.shield(question), RUNNING_INFO_TIMEOUT_S)
        except TimeoutError:
            raise BrokerError(rmq_pb2.SYSTEM_ERROR, f"consumer {client_id} did not answer in "
                                                    f"{RUNNING_INFO_TIMEOUT_S:.0f} s") from None
        finally:
            if watch.info is question:
                watch.info, watch.info_request = None, ""

    def answer_running_info(self, group: str, client_id: str, request_id: str,
                            info: rmq_pb2.ConsumerRunningInfo) -> None:
        watch = self._watches.get((group, client_id))
        if watch is None or watch.info is None or not request_id or watch.info_request != request_id:
            raise illegal_argument(f"no running info question {request_id!r} is open for client {client_id}")
        if not watch.info.done():
            watch.info.set_result(info)

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
                watch.members_changed = True
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
