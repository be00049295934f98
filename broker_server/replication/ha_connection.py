"""The master's side of replication (RocketMQ HAConnection + the master half of
SlaveSynchronize), served as rmq.v1 HAService (docs/replication.md).

Transfer: one bidirectional stream per slave. The slave's first HAReport says what it holds;
a slave whose CommitLog is longer than ours or differs from ours is refused with one clear
status. Then CommitLog bytes flow from its offset, one chunk (<= 1 MiB, within one file) per
message, as soon as a put appends them; each later report acknowledges what the slave wrote,
which is what a SYNC_MASTER put waits for (store HAService.wait_for_slave). A report is counted
up to what was sent on its stream, never beyond: a slave cannot claim bytes it never received. The topic table
travels on the same stream: whole, first and after every change, ahead of any chunk read after
the change (so ahead of the first record of a new topic); the slave acknowledges the version it
applied, which a SYNC_MASTER topic change waits for (`wait_for_topics`). Consumer offsets
committed here follow on the same stream as they change (OffsetChanges), so a slave that
replaces a lost master has them, not the ones of its last SlaveSynchronize.

SlaveSynchronize: the master keeps the higher of its own and the slave's offsets for what
clients committed on the slave (while this master was down), then hands back its topics,
consumer offsets, delay offsets and subscription group settings.

With a cluster secret (rmq.broker_server.security.cluster_auth) both exchanges begin with the slave's
proof, which must verify before anything is sent or applied; every message after it, both
ways, carries the session's MAC, and a report without one ends the stream."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.grpc_aio import Context
from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager, OffsetKey
from rmq.broker_server.offsets.offset_changes import OffsetChanges, group_offset
from rmq.broker_server.offsets.subscription_group_manager import SubscriptionGroupManager
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.security.cluster_auth import (
    Direction,
    Exchange,
    MasterAuth,
    ProofRefused,
    Session,
    signed,
)
from rmq.broker_server.status import OK, answers_with_status
from rmq.store import MessageStore
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

log = logging.getLogger(__name__)

IDLE_TRANSFER_S = 5.0   # haSendHeartbeatInterval: an empty chunk tells an idle slave the master's offset
OFFSETS_PER_TRANSFER = 10_000   # consumer offsets in one message of the stream


class HAServicer(rmq_pb2_grpc.HAServiceServicer):
    def __init__(self, store: MessageStore, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 groups: SubscriptionGroupManager, delay_offsets: Callable[[], dict[int, int]],
                 timer_progress: Callable[[], tuple[int, int]], auth: MasterAuth) -> None:
        self.store = store
        self.auth = auth
        self.ha = store.ha_service
        self.topics = topics
        self.offsets = offsets
        self.groups = groups
        self.delay_offsets = delay_offsets
        self.timer_progress = timer_progress
        self._wakeups: set[asyncio.Event] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ending = False
        self._topics_acked: dict[int, int] = {}    # connection -> topic table version it applied
        self._sent: dict[int, int] = {}            # connection -> CommitLog offset sent up to
        self._topics_ack = asyncio.Condition()
        self._offset_changes = OffsetChanges(offsets.max_entries)
        self.ha.add_new_data_listener(self._on_new_data)
        topics.add_listener(self._on_new_data)
        offsets.add_listener(self._on_offset_committed)

    def _on_offset_committed(self, key: OffsetKey, offset: int) -> None:
        self._offset_changes.committed(key, offset)
        self._on_new_data()

    def _on_new_data(self) -> None:
        """Any thread, after an append or a topic change: wake every transfer stream."""
        if self._wakeups and self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._wake_all)
            except RuntimeError:   # loop closed during shutdown
                pass

    def _wake_all(self) -> None:
        for event in self._wakeups:
            event.set()

    def end_streams(self) -> None:
        """Shutdown: end every transfer stream now (the server's grace period would wait for them)."""
        self._ending = True
        self._wake_all()

    async def Transfer(self, request_iterator: AsyncIterator[rmq_pb2.HAReport],
                       context: Context) -> AsyncIterator[rmq_pb2.HATransfer]:
        self._loop = asyncio.get_running_loop()
        first = await anext(aiter(request_iterator), None)
        if first is None:
            return
        address = first.address or context.peer()
        try:
            session = self.auth.admit(first, Exchange.TRANSFER)
        except ProofRefused as error:
            log.error("slave %s (peer %s) refused: %s", address[:64], context.peer(), error)
            yield _refusal(self.auth.refusal_session(first), rmq_pb2.NO_PERMISSION, str(error))
            return
        refusal = self.ha.check_slave(first.max_offset, first.check_offset, first.check_crc)
        if refusal is not None:
            log.error("slave %s refused: %s", address, refusal)
            yield _refusal(session, rmq_pb2.ILLEGAL_ARGUMENT, refusal,
                           master_max_offset=self.store.get_commit_log_max_offset())
            return
        connection = self.ha.connect_slave(address, first.max_offset)
        self._topics_acked[connection] = -1
        self._sent[connection] = first.max_offset
        log.info("slave %s connected at CommitLog offset %d", address, first.max_offset)
        acks = asyncio.ensure_future(self._read_acks(request_iterator, connection, session, address))
        new_data = asyncio.Event()
        self._wakeups.add(new_data)
        try:
            async for transfer in self._chunks(self.ha.transfer_start(first.max_offset), new_data, acks):
                if transfer.data:   # before it goes: the slave's report of it may come back at once
                    self._sent[connection] = transfer.offset + len(transfer.data)
                yield signed(session, Direction.FROM_MASTER, transfer)
        finally:
            self._wakeups.discard(new_data)
            acks.cancel()
            self._sent.pop(connection, None)
            self.ha.disconnect_slave(connection)
            await self._topics_applied(connection, None)
            log.info("slave %s disconnected", address)

    async def _chunks(self, offset: int, new_data: asyncio.Event, acks: asyncio.Future[None]
                      ) -> AsyncIterator[rmq_pb2.HATransfer]:
        """The topic table, CommitLog chunks from `offset` and the consumer offsets committed
        from now on, while the slave's report stream lasts."""
        sent_version = -1
        offsets_sent = self._offset_changes.count
        while not acks.done() and not self._ending:
            new_data.clear()
            changed, offsets_sent = self._offset_changes.since(offsets_sent)
            for start in range(0, len(changed), OFFSETS_PER_TRANSFER):
                yield self._transfer(offset, offsets=changed[start:start + OFFSETS_PER_TRANSFER])
            data = self.ha.read(offset)
            if self.topics.version > sent_version:   # read after the data: a topic before its records
                sent_version = self.topics.version
                yield self._transfer(offset, topic_table=rmq_pb2.TopicTable(
                    topics=[config.to_proto() for config in self.topics.all()], version=sent_version))
            if data:
                yield self._transfer(offset, data=data)
                offset += len(data)
                continue
            waiter = asyncio.ensure_future(new_data.wait())
            try:
                either: list[asyncio.Future[Any]] = [acks, waiter]
                done, _ = await asyncio.wait(either, timeout=IDLE_TRANSFER_S,
                                             return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            if not done:
                yield self._transfer(offset)

    def _transfer(self, offset: int, **fields: Any) -> rmq_pb2.HATransfer:
        """A message of the stream at CommitLog `offset`, with the master's current end."""
        return rmq_pb2.HATransfer(status=OK, offset=offset,
                                  master_max_offset=self.store.get_commit_log_max_offset(), **fields)

    async def _read_acks(self, reports: AsyncIterator[rmq_pb2.HAReport], connection: int,
                         session: Session | None, address: str) -> None:
        """Count each report's acknowledgement (up to what was sent) until the stream ends or a
        report fails its MAC."""
        warned = False
        async for report in reports:
            if session is not None:
                try:
                    session.check(Direction.FROM_SLAVE, report)
                except ProofRefused as error:
                    log.error("slave %s: report not counted, stream ended: %s", address[:64], error)
                    return
            sent = self._sent.get(connection, 0)
            if report.max_offset > sent and not warned:
                log.warning("slave %s reports CommitLog offset %d, beyond the %d sent to it: counted up to "
                            "what was sent (logged once per stream)", address[:64], report.max_offset, sent)
                warned = True
            self.ha.slave_acked(connection, min(report.max_offset, sent))
            if report.topics_version > self._topics_acked.get(connection, report.topics_version):
                await self._topics_applied(connection, report.topics_version)

    async def _topics_applied(self, connection: int, version: int | None) -> None:
        """The slave on `connection` applied topic table `version` (None: it disconnected)."""
        async with self._topics_ack:
            if version is None:
                self._topics_acked.pop(connection, None)
            else:
                self._topics_acked[connection] = version
            self._topics_ack.notify_all()

    async def wait_for_topics(self, version: int, timeout_s: float) -> bool:
        """A SYNC_MASTER topic change: True once a connected slave applied topic table
        `version` (at once when no slave is connected), False when none did within the timeout."""
        def applied() -> bool:
            return not self._topics_acked or max(self._topics_acked.values()) >= version

        async with self._topics_ack:
            try:
                await asyncio.wait_for(self._topics_ack.wait_for(applied), timeout_s)
            except TimeoutError:
                return False
        return True

    @answers_with_status(rmq_pb2.SlaveSynchronizeResponse)
    async def SlaveSynchronize(self, request: rmq_pb2.SlaveSynchronizeRequest,
                               context: Context) -> rmq_pb2.SlaveSynchronizeResponse:
        try:
            session = self.auth.admit(request, Exchange.SYNCHRONIZE)
        except ProofRefused as error:
            log.error("SlaveSynchronize from %s refused: %s", context.peer(), error)
            raise BrokerError(rmq_pb2.NO_PERMISSION, str(error)) from None
        for item in request.committed_on_slave:
            self.offsets.commit_offset(item.consumer_group, item.topic, item.queue_id, item.offset,
                                       increase_only=True)
        timer_read_time_ms, timer_commit_log_end = self.timer_progress()
        return signed(session, Direction.FROM_MASTER, rmq_pb2.SlaveSynchronizeResponse(
            status=OK, timer_read_time_ms=timer_read_time_ms, timer_commit_log_end=timer_commit_log_end,
            topics=[config.to_proto() for config in self.topics.all()],
            offsets=[group_offset(key, offset) for key, offset in self.offsets.all_offsets().items()],
            delay_offsets=self.delay_offsets(),
            subscription_groups=[config.to_proto() for config in self.groups.all()],
        ))


def _refusal(session: Session | None, code: rmq_pb2.Code, message: str, **fields: Any) -> rmq_pb2.HATransfer:
    return signed(session, Direction.FROM_MASTER,
                  rmq_pb2.HATransfer(status=rmq_pb2.Status(code=code, message=message), **fields))
