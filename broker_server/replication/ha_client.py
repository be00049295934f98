"""The slave's side of replication (RocketMQ HAClient and SlaveSynchronize,
docs/replication.md).

HAClient: opens HAService.Transfer on the master, reports the CommitLog offset this store
recovered to (and a crc32 of the bytes before it), appends every chunk the master sends at the
same offset (the store dispatches its own ConsumeQueues and index) and acknowledges each one;
it applies the master's topic table, which comes on the same stream ahead of the records of a
new topic, and acknowledges its version, and takes the consumer offsets committed on the master
as they come.
A master that refuses this slave (its CommitLog diverged) stops replication for good: the
reason is logged once and shown by `rmq broker status`; nothing is written. A master that is
down is retried every second. With a cluster secret (rmq.broker_server.security.cluster_auth) the first
report carries this slave's proof and every message of the master must carry the session's
MAC before anything of it is used: a message that does not ends the stream, is shown by
`rmq broker status`, and the slave tries again every second.

SlaveSynchronize: every 10 s copy the master's topics, consumer offsets, delay offsets and
subscription group settings (the slave's table becomes the master's, so a promoted slave keeps a
disabled group disabled), after handing it the offsets clients committed here (the master keeps
the higher ones)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager, OffsetKey
from rmq.broker_server.offsets.offset_changes import group_offset
from rmq.broker_server.offsets.subscription_group_manager import (
    SubscriptionGroupConfig,
    SubscriptionGroupManager,
)
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.security.cluster_auth import (
    Direction,
    Exchange,
    ProofRefused,
    Session,
    SlaveAuth,
    signed,
)
from rmq.store import MessageStore, StoreError
from rmq.topic_config import TopicConfig
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

log = logging.getLogger(__name__)

RECONNECT_S = 1.0
SYNC_TIMEOUT_S = 5.0


class MasterLink:
    """A task of this slave that talks to its master over one channel."""

    def __init__(self, master: str, open_channel: Callable[[str], grpc.aio.Channel]) -> None:
        self.master = master
        self._open_channel = open_channel
        self._task: asyncio.Task[None] | None = None
        self._channel: grpc.aio.Channel | None = None

    def start(self) -> None:
        self._channel = self._open_channel(self.master)
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._channel is not None:
            await self._channel.close()

    async def _run(self) -> None:
        raise NotImplementedError


class HAClient(MasterLink):
    def __init__(self, store: MessageStore, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 on_topics_changed: Callable[[], None], master: str, own_address: str,
                 open_channel: Callable[[str], grpc.aio.Channel], auth: SlaveAuth) -> None:
        super().__init__(master, open_channel)
        self.store = store
        self.topics = topics
        self.offsets = offsets
        self.on_topics_changed = on_topics_changed
        self.own_address = own_address
        self.auth = auth
        self.master_max_offset = 0
        self.refusal = ""            # why the master refused this slave ("" while replicating)
        self.unauthenticated = ""    # why the last answer on the master address was not trusted
        self.connected = False

    async def _run(self) -> None:
        warned = False
        while not self.refusal:
            try:
                await self._replicate()
            except grpc.RpcError as error:
                if not warned:
                    log.warning("master %s unreachable (%s); retrying every %gs", self.master,
                                error.code().name if isinstance(error, grpc.Call) else error, RECONNECT_S)
                warned = True
            except StoreError as error:
                log.error("replication from %s stopped: %s; reconnecting", self.master, error)
            except ProofRefused as error:
                if not self.unauthenticated:
                    log.error("the master at %s is not trusted: %s (is it the group's master, with the same "
                              "--cluster-secret?); nothing of it written, retrying every %gs",
                              self.master, error, RECONNECT_S)
                self.unauthenticated = str(error)
            else:
                warned = False
            self.connected = False
            if not self.refusal:
                await asyncio.sleep(RECONNECT_S)

    async def _replicate(self) -> None:
        """One Transfer call: report, then append and acknowledge every chunk until it ends."""
        assert self._channel is not None
        check_offset, check_crc = self.store.ha_service.tail_check()
        start = self.store.get_commit_log_max_offset()
        call = rmq_pb2_grpc.HAServiceStub(self._channel).Transfer()
        try:
            first = rmq_pb2.HAReport(max_offset=start, check_offset=check_offset, check_crc=check_crc,
                                     address=self.own_address)
            session = self.auth.open(first, Exchange.TRANSFER)
            await call.write(first)
            while isinstance(transfer := await call.read(), rmq_pb2.HATransfer):   # else grpc.aio.EOF
                if session is not None:
                    _check(session, transfer)
                    self.unauthenticated = ""
                if transfer.status.code != rmq_pb2.OK:
                    self.refusal = transfer.status.message
                    log.error("master %s refuses this slave: %s", self.master, self.refusal)
                    return
                if not self.connected:
                    log.info("replicating from master %s at CommitLog offset %d", self.master, start)
                    self.connected = True
                self.master_max_offset = transfer.master_max_offset
                report = self._apply(transfer)
                if report is not None:
                    await call.write(signed(session, Direction.FROM_SLAVE, report))
        finally:
            call.cancel()

    def _apply(self, transfer: rmq_pb2.HATransfer) -> rmq_pb2.HAReport | None:
        """Take one message of the master (its topic table, consumer offsets, CommitLog bytes);
        the report acknowledging what this slave now holds, or None when there is nothing to
        acknowledge."""
        report = None
        if transfer.HasField("topic_table"):
            table = transfer.topic_table
            apply_master_topics(self.topics, [TopicConfig.from_proto(t) for t in table.topics],
                                self.on_topics_changed)
            report = rmq_pb2.HAReport(topics_version=table.version)
        for item in transfer.offsets:
            self.offsets.commit_offset(item.consumer_group, item.topic, item.queue_id, item.offset)
        if transfer.data:
            self.store.append_replicated(transfer.offset, transfer.data)
            report = report or rmq_pb2.HAReport()
        if report is not None:
            report.max_offset = self.store.get_commit_log_max_offset()   # written here, never more
        return report


def _check(session: Session, answer: rmq_pb2.HATransfer | rmq_pb2.SlaveSynchronizeResponse) -> None:
    """ProofRefused unless the master's answer carries the session's MAC; the refusal repeats
    a non-OK status the answer held, for the operator (nothing else of it is used)."""
    try:
        session.check(Direction.FROM_MASTER, answer)
    except ProofRefused as error:
        said = (f"; it answered {rmq_pb2.Code.Name(answer.status.code)}: {answer.status.message[:200]}"
                if answer.status.code != rmq_pb2.OK else "")
        raise ProofRefused(f"{error}{said}") from None


class SlaveSynchronize(MasterLink):
    def __init__(self, master: str, topics: TopicConfigManager, offsets: ConsumerOffsetManager,
                 groups: SubscriptionGroupManager, set_delay_offsets: Callable[[dict[int, int]], None],
                 set_timer_progress: Callable[[int, int], None], on_topics_changed: Callable[[], None],
                 interval_ms: int, open_channel: Callable[[str], grpc.aio.Channel], auth: SlaveAuth) -> None:
        super().__init__(master, open_channel)
        self.auth = auth
        self.topics = topics
        self.offsets = offsets
        self.groups = groups
        self.set_delay_offsets = set_delay_offsets
        self.set_timer_progress = set_timer_progress
        self.on_topics_changed = on_topics_changed
        self.interval_ms = interval_ms
        self._synced: dict[OffsetKey, int] = {}    # the offsets as the master last gave them

    async def _run(self) -> None:
        while True:
            try:
                await self.sync_all()
            except grpc.RpcError:
                pass   # the master is down: HAClient says so; try again next period
            except ProofRefused as error:
                log.warning("SlaveSynchronize answer from %s ignored: %s", self.master, error)
            except Exception:
                log.exception("slave synchronize with %s failed", self.master)
            await asyncio.sleep(self.interval_ms / 1000)

    async def sync_all(self) -> None:
        assert self._channel is not None
        committed_here = {key: offset for key, offset in self.offsets.all_offsets().items()
                          if self._synced.get(key) != offset}
        request = rmq_pb2.SlaveSynchronizeRequest(committed_on_slave=[
            group_offset(key, offset) for key, offset in committed_here.items()])
        session = self.auth.open(request, Exchange.SYNCHRONIZE)
        response = await rmq_pb2_grpc.HAServiceStub(self._channel).SlaveSynchronize(
            request, timeout=SYNC_TIMEOUT_S)
        if session is not None:
            _check(session, response)
        if response.status.code != rmq_pb2.OK:
            log.warning("master %s refused SlaveSynchronize: %s", self.master, response.status.message)
            return
        apply_master_topics(self.topics, [TopicConfig.from_proto(t) for t in response.topics],
                            self.on_topics_changed)
        synced: dict[OffsetKey, int] = {}
        for item in response.offsets:
            self.offsets.commit_offset(item.consumer_group, item.topic, item.queue_id, item.offset)
            synced[OffsetKey(item.consumer_group, item.topic, item.queue_id)] = item.offset
        self._synced = synced
        self.set_delay_offsets(dict(response.delay_offsets))
        self.set_timer_progress(response.timer_read_time_ms, response.timer_commit_log_end)
        apply_master_groups(self.groups, [SubscriptionGroupConfig.from_proto(config)
                                          for config in response.subscription_groups])


def apply_master_groups(groups: SubscriptionGroupManager,
                        master_groups: list[SubscriptionGroupConfig]) -> None:
    """Make this slave's subscription group table the master's (syncSubscriptionGroupConfig);
    a table this slave cannot store is logged and the slave keeps its own."""
    try:
        groups.replace_all(master_groups)
    except BrokerError as error:
        log.warning("subscription groups from the master not applied: %s", error.message)


def apply_master_topics(topics: TopicConfigManager, master_topics: list[TopicConfig],
                        on_topics_changed: Callable[[], None]) -> None:
    """Make this slave's topic table the master's (syncTopicConfig)."""
    ours = {config.topic_name: config for config in topics.all()}
    theirs = {config.topic_name: config for config in master_topics}
    changed = False
    for name in ours.keys() - theirs.keys():
        topics.delete(name)
        changed = True
    for name, config in theirs.items():
        if ours.get(name) == config:
            continue
        try:
            if name in ours:
                topics.update(config)
            else:
                topics.create(config)
        except BrokerError as error:
            log.warning("topic %s from the master not applied: %s", name, error.message)
            continue
        changed = True
    if changed:
        on_topics_changed()
