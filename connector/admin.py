"""Operations on a running cluster, RocketMQ's MQAdminExt: look messages up by key, id or time
range (with each group's consume state), see which member of a group owns which queue, show a
group's progress, reset its offsets, delete it, and list its dead letters. The `rmq message`
and `rmq group` commands and `rmq console` are built on it; every answer is bounded."""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rmq import message_format as mf
from rmq import retry
from rmq.connector.allocation import AllocateStrategy, allocate
from rmq.connector.client import OutgoingMessage, QueueOffsets, RmqClient, unless_unreachable
from rmq.connector.errors import ConfigError, RmqError, RmqRefused, RmqUnavailable
from rmq.connector.message import MessageExt, decode_messages
from rmq.message_queue import MessageQueue
from rmq.statuses import PullStatus
from rmq.v1 import rmq_pb2

KEY_QUERY_MAX = 64          # messages per broker of a key lookup (RocketMQ maxMsgsNumBatch)
PAGE_MAX = 500              # messages per page of a time-range lookup
BROWSE_BATCH = 256
# properties the broker sets on a stored copy, not carried into a re-published one
NOT_REPUBLISHED = frozenset({mf.PROPERTY_TAGS, mf.PROPERTY_KEYS, mf.PROPERTY_REAL_TOPIC,
                             mf.PROPERTY_REAL_QUEUE_ID, mf.PROPERTY_DELAY_TIME_LEVEL, mf.PROPERTY_UNIQ_KEY})


class ClientProtocol(enum.IntEnum):
    """How a member reached its broker (rmq.v1 ClientProtocol wire values)."""

    RMQ = rmq_pb2.CLIENT_PROTOCOL_RMQ
    ROCKETMQ_V2 = rmq_pb2.CLIENT_PROTOCOL_ROCKETMQ_V2
    REMOTING = rmq_pb2.CLIENT_PROTOCOL_REMOTING

    @property
    def label(self) -> str:
        return {ClientProtocol.RMQ: "rmq", ClientProtocol.ROCKETMQ_V2: "rocketmq-5",
                ClientProtocol.REMOTING: "rocketmq-4"}[self]


class ResetTo(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True)
class ResetTarget:
    to: ResetTo
    timestamp_ms: int = 0

    @classmethod
    def parse(cls, text: str) -> ResetTarget:
        """`earliest`, `latest` or `timestamp:<epoch-ms>`; ValueError naming the accepted forms."""
        kind, _, value = text.partition(":")
        if text in (ResetTo.EARLIEST.value, ResetTo.LATEST.value):
            return cls(ResetTo(text))
        if kind == ResetTo.TIMESTAMP.value and value.isdigit():
            return cls(ResetTo.TIMESTAMP, int(value))
        raise ConfigError(f"cannot reset to {text!r}: use earliest, latest or timestamp:<epoch-ms>")


@dataclass(frozen=True)
class GroupMember:
    """One live client of a group, on every broker that knows it."""

    client_id: str
    protocol: ClientProtocol
    address: str
    broadcasting: bool
    subscriptions: dict[str, str]       # topic -> expression
    queues: tuple[MessageQueue, ...]    # the queues it owns; none for RocketMQ 5 (pop) clients


@dataclass(frozen=True)
class ProducerMember:
    """One live producer of a producer group (RocketMQ producerConnection)."""

    client_id: str
    protocol: ClientProtocol
    address: str
    language: str
    version: int


@dataclass(frozen=True)
class QueueProgress:
    """One queue of a group's progress (mqadmin consumerProgress)."""

    queue: MessageQueue
    min_offset: int
    max_offset: int
    consumer_offset: int | None         # None: never committed
    owner: str = ""                     # client id of the member that owns it, "" when none

    @property
    def lag(self) -> int:
        """What the queue still holds for the group (everything, when it never committed)."""
        start = self.min_offset if self.consumer_offset is None else self.consumer_offset
        return max(self.max_offset - start, 0)


@dataclass(frozen=True)
class GroupProgress:
    group: str
    queues: list[QueueProgress]
    unreachable: dict[str, str]         # broker name -> why it could not be asked

    @property
    def total_lag(self) -> int:
        return sum(queue.lag for queue in self.queues)

    @property
    def complete(self) -> bool:
        return not self.unreachable


@dataclass(frozen=True)
class ConsumeState:
    """Whether `group` has consumed a message: its committed offset on the message's queue."""

    group: str
    consumed: bool


@dataclass(frozen=True)
class ResetResult:
    queue: MessageQueue
    offset: int
    note: str = ""                      # e.g. earlier than the earliest message: reset to the earliest


@dataclass(frozen=True)
class ControlledGroup:
    """One broker group as the leading controller holds it (docs/controller.md)."""

    broker_name: str
    epoch: int
    master_id: int
    in_sync_ids: list[int]              # the SyncStateSet


@dataclass(frozen=True)
class ControllerState:
    leader: str                         # the leading controller's address
    groups: list[ControlledGroup]


@dataclass(frozen=True)
class ResetReport:
    results: list[ResetResult]
    notified: list[str]                 # live consumers that adopted the reset
    untold: list[str]                   # live members no broker could tell (a forced reset)


@dataclass(frozen=True)
class GroupSettings:
    """A group's settings on one broker (RocketMQ's SubscriptionGroupConfig)."""

    consume_enable: bool
    retry_max_times: int
    stored: bool                        # False: none stored there, the defaults apply


class MQAdmin:
    def __init__(self, client: RmqClient) -> None:
        self.client = client

    # ------------------------------------------------------------ controller mode
    def controller(self) -> ControllerState | None:
        """The leading controller and each group's epoch, master and SyncStateSet; None when no
        endpoint runs a controller (or none answers)."""
        answer = self.client.describe_controller()
        if answer is None:
            return None
        return ControllerState(answer.leader_address, [
            ControlledGroup(g.broker_name, g.epoch, g.master_broker_id, sorted(g.in_sync_ids))
            for g in answer.groups])

    # ------------------------------------------------------------ messages

    def query_by_key(self, topic: str, key: str, begin_ms: int = 0, end_ms: int = 0,
                     limit: int = KEY_QUERY_MAX, unreachable: dict[str, RmqUnavailable] | None = None
                     ) -> list[MessageExt]:
        """Messages of `topic` carrying `key` (KEYS or the producer's unique id), oldest first;
        with `unreachable`, brokers that cannot be reached are recorded there and skipped."""
        found: list[MessageExt] = []
        for broker_name in self.client.route(topic).brokers:
            query = functools.partial(self.client.query_message_by_key, topic, broker_name, key,
                                      begin_ms=begin_ms, end_ms=end_ms,
                                      max_messages=min(limit, KEY_QUERY_MAX))
            packed = unless_unreachable(query, broker_name, unreachable)
            if packed is not None:
                found += decode_messages(packed, MessageQueue(topic, broker_name, 0))
        return sorted(found, key=lambda m: (m.store_timestamp, m.broker_name, m.commit_log_offset))[:limit]

    def view(self, msg_id: str) -> MessageExt:
        """The message with an offset message id (`MessageExt.msg_id`: store host + CommitLog
        offset; the store host is the member's remoting port when it serves one, as in RocketMQ);
        RmqError QUERY_NOT_FOUND when no broker stores it."""
        address, offset = parse_msg_id(msg_id)
        for broker_name, members in self.client.list_broker_groups().items():
            for member in members:
                if address in (member.address, member.remoting_address):
                    packed = self.client.view_message(member.address, offset)
                    return decode_messages(packed, MessageQueue("", broker_name, 0))[0]
        raise RmqRefused(rmq_pb2.QUERY_NOT_FOUND, f"message id {msg_id} names broker {address}, which is not "
                         "in this cluster")

    def query_by_time(self, topic: str, begin_ms: int, end_ms: int, limit: int = 100, page: int = 0,
                      unreachable: dict[str, RmqUnavailable] | None = None) -> list[MessageExt]:
        """The page (`limit` messages, at most PAGE_MAX) of the topic's messages stored in
        [begin_ms, end_ms), queue by queue in offset order (of reachable brokers, with `unreachable`)."""
        limit = max(1, min(limit, PAGE_MAX))
        ranges = ((mq, self.client.search_offset(mq, begin_ms), self.client.search_offset(mq, end_ms))
                  for mq in sorted(self.client.topic_offsets(topic, unreachable)))
        return self._page(ranges, page * limit, limit)

    def _page(self, ranges: Iterable[tuple[MessageQueue, int, int]], skip: int, limit: int
              ) -> list[MessageExt]:
        """`limit` messages after the first `skip` of the queues' [start, end) ranges, in order."""
        messages: list[MessageExt] = []
        for mq, start, end in ranges:
            if skip >= end - start:
                skip -= max(end - start, 0)
                continue
            messages += self.browse(mq, start + skip, min(end, start + skip + limit - len(messages)))
            skip = 0
            if len(messages) >= limit:
                break
        return messages

    def browse(self, mq: MessageQueue, start: int, end: int) -> list[MessageExt]:
        """The messages of one queue in [start, end), whatever the topic's permission."""
        messages: list[MessageExt] = []
        offset = start
        while offset < end:
            result = self.client.browse_messages(mq, offset, min(BROWSE_BATCH, end - offset))
            if result.pull_status != PullStatus.FOUND:
                break
            messages += [m for m in decode_messages(result.messages, mq) if m.queue_offset < end]
            offset = result.next_begin_offset
        return messages

    def consume_states(self, message: MessageExt, groups: Iterable[str]) -> list[ConsumeState]:
        """Whether each group has consumed the message (committed past its offset)."""
        mq = MessageQueue(message.topic, message.broker_name, message.queue_id)
        states = []
        for group in groups:
            committed = self.client.query_consumer_offsets(group, mq.topic, broker_name=mq.broker_name)
            states.append(ConsumeState(group, committed.get(mq, 0) > message.queue_offset))
        return states

    # ------------------------------------------------------------ groups

    def groups(self, unreachable: dict[str, RmqUnavailable] | None = None) -> list[str]:
        """Every consumer group a broker knows: live members of every protocol (RocketMQ 5 clients
        included), committed offsets, retry and dead-letter topics; `unreachable` as for
        RmqClient.topic_offsets."""
        return self.client.list_consumer_groups(unreachable)

    def members(self, group: str, unreachable: dict[str, RmqUnavailable] | None = None) -> list[GroupMember]:
        """The group's live members of every protocol, with the queues each owns: for clustering
        consumers the averagely allocation of each subscribed topic's queues among the members that
        subscribe to it (the default strategy); broadcasting members own every queue."""
        by_id: dict[str, rmq_pb2.ConsumerConnection] = {}
        for connections in self.client.consumer_connections(group, unreachable).values():
            for connection in connections:
                by_id.setdefault(connection.client_id, connection)
        owned = self._owned_queues(list(by_id.values()))
        return [GroupMember(c.client_id, ClientProtocol(c.protocol), c.address,
                            c.message_model == rmq_pb2.BROADCASTING,
                            {s.topic: s.sub_expression for s in c.subscriptions},
                            tuple(sorted(owned.get(c.client_id, ()))))
                for c in sorted(by_id.values(), key=lambda c: c.client_id)]

    def producers(self, group: str, unreachable: dict[str, RmqUnavailable] | None = None
                  ) -> list[ProducerMember]:
        """The producer group's live producers on every broker that knows them."""
        by_id: dict[str, rmq_pb2.ProducerConnection] = {}
        for connections in self.client.producer_connections(group, unreachable).values():
            for connection in connections:
                by_id.setdefault(connection.client_id, connection)
        return [ProducerMember(c.client_id, ClientProtocol(c.protocol), c.address, c.language, c.version)
                for c in sorted(by_id.values(), key=lambda c: c.client_id)]

    def _owned_queues(self, connections: Sequence[rmq_pb2.ConsumerConnection]
                      ) -> dict[str, list[MessageQueue]]:
        owned: dict[str, list[MessageQueue]] = {}
        pulling = [c for c in connections if c.protocol != rmq_pb2.CLIENT_PROTOCOL_ROCKETMQ_V2]
        for topic in sorted({s.topic for c in pulling for s in c.subscriptions}):
            try:
                queues = sorted(self.client.route(topic).message_queues)
            except RmqError:
                continue
            subscribers = [c for c in pulling if any(s.topic == topic for s in c.subscriptions)]
            clustering = sorted(c.client_id for c in subscribers if c.message_model != rmq_pb2.BROADCASTING)
            for connection in subscribers:
                mine = (queues if connection.message_model == rmq_pb2.BROADCASTING
                        else allocate(AllocateStrategy.AVG, connection.client_id, queues, clustering))
                owned.setdefault(connection.client_id, []).extend(mine)
        return owned

    def progress(self, group: str, topic: str = "") -> GroupProgress:
        """Per queue of the group's topics (or of `topic`), its retry topic included: offsets,
        lag and owner. Unreachable brokers are named, their queues left out."""
        unreachable: dict[str, RmqUnavailable] = {}
        committed = self.client.query_consumer_offsets(group, topic, unreachable)
        topics = {mq.topic for mq in committed} | {retry.retry_topic(group)} | ({topic} if topic else set())
        owners = {mq: member.client_id for member in self.members(group) if not member.broadcasting
                  for mq in member.queues}
        queues = []
        for name in sorted(topics):
            for mq, bounds in self._offsets_if_exists(name, unreachable).items():
                queues.append(QueueProgress(mq, bounds.min_offset, bounds.max_offset, committed.get(mq),
                                            owners.get(mq, "")))
        return GroupProgress(group, queues, {name: str(error) for name, error in unreachable.items()})

    def _offsets_if_exists(self, topic: str, unreachable: dict[str, RmqUnavailable] | None
                           ) -> dict[MessageQueue, QueueOffsets]:
        try:
            return self.client.topic_offsets(topic, unreachable)
        except RmqError as error:
            if error.code == rmq_pb2.TOPIC_NOT_EXIST:
                return {}
            raise

    def reset_offsets(self, group: str, topic: str, target: ResetTarget, force: bool = False) -> ResetReport:
        """Set the group's committed offset on every queue of `topic`, or of every topic it has
        offsets on or its members subscribe to when `topic` is "" (RocketMQ resetOffsetByTimestamp;
        to LATEST it is the Dashboard's skipAccumulate). The brokers tell the group's live rmq
        consumers, which drop what they cached and read on from the reset offsets
        (RESET_CONSUMER_CLIENT_OFFSET), and its 4.x remoting consumers. Refused, unless `force`, while
        the group has live members no broker can tell (RocketMQ 5 clients, rmq clients without a
        membership watch): they
        keep their positions and would commit over the reset."""
        topics = [topic] if topic else sorted(
            {mq.topic for mq in self.client.query_consumer_offsets(group)}
            | {name for member in self.members(group) for name in member.subscriptions})
        if not topics:
            raise RmqRefused(rmq_pb2.ILLEGAL_ARGUMENT, f"consumer group {group} has neither committed "
                             "offsets nor live members: name the topic to reset")
        results = [self._reset_target(mq, bounds, target) for name in topics
                   for mq, bounds in (self._offsets_if_exists(name, None) if not topic
                                      else self.client.topic_offsets(name)).items()]
        offsets = {r.queue: r.offset for r in results}
        notified, untold = self.client.reset_consumer_offsets(group, offsets, force)
        return ResetReport(results, notified, untold)

    def _reset_target(self, mq: MessageQueue, bounds: QueueOffsets, target: ResetTarget) -> ResetResult:
        if target.to is ResetTo.EARLIEST:
            return ResetResult(mq, bounds.min_offset)
        if target.to is ResetTo.LATEST:
            return ResetResult(mq, bounds.max_offset)
        offset = self.client.search_offset(mq, target.timestamp_ms)
        if offset <= bounds.min_offset and bounds.max_offset > bounds.min_offset:
            first = self.browse(mq, bounds.min_offset, bounds.min_offset + 1)
            if first and first[0].store_timestamp > target.timestamp_ms:
                return ResetResult(mq, bounds.min_offset, "the time is before the earliest message: "
                                                          "reset to the earliest")
        return ResetResult(mq, offset)

    def running_infos(self, group: str) -> dict[str, rmq_pb2.ConsumerRunningInfo | str]:
        """client id -> each live member's running info (RocketMQ consumerStatus), or why it could
        not be had (RocketMQ 4.x/5 clients are not asked; a client that does not answer)."""
        infos: dict[str, rmq_pb2.ConsumerRunningInfo | str] = {}
        for member in self.members(group):
            if member.protocol is not ClientProtocol.RMQ:
                infos[member.client_id] = f"not asked: a {member.protocol.label} client"
                continue
            try:
                infos[member.client_id] = self.client.consumer_running_info(group, member.client_id)
            except RmqError as error:
                infos[member.client_id] = str(error)
        return infos

    def group_settings(self, group: str, unreachable: dict[str, RmqUnavailable] | None = None
                       ) -> dict[str, GroupSettings]:
        """broker name -> the group's settings there (consume enabled, retries before the DLQ)."""
        return {name: GroupSettings(answer.config.consume_enable, answer.config.retry_max_times,
                                    answer.stored)
                for name, answer in self.client.subscription_groups(group, unreachable).items()}

    def update_group_settings(self, group: str, consume_enable: bool | None = None,
                              retry_max_times: int | None = None) -> dict[str, GroupSettings]:
        """Change the given settings on every broker (RocketMQ updateSubGroup, admin), keeping the
        others as each broker has them; returns the settings now stored."""
        updated = {}
        for name, now in self.group_settings(group).items():
            settings = GroupSettings(
                now.consume_enable if consume_enable is None else consume_enable,
                now.retry_max_times if retry_max_times is None else retry_max_times, stored=True)
            self.client.update_subscription_group(name, rmq_pb2.SubscriptionGroupConfig(
                consumer_group=group, consume_enable=settings.consume_enable,
                retry_max_times=settings.retry_max_times))
            updated[name] = settings
        return updated

    def delete_group(self, group: str, force: bool = False) -> list[str]:
        """Forget the group: its committed offsets on every topic, its retry and dead-letter
        topics and its stored settings (RocketMQ deleteSubGroup with removeOffset). Refused while
        it has live members unless `force`. Returns the topics whose offsets were removed."""
        live = [m.client_id for m in self.members(group)]
        if live and not force:
            raise RmqRefused(rmq_pb2.ILLEGAL_ARGUMENT, f"consumer group {group} has {len(live)} live "
                             "member(s): stop them first, or force the delete")
        committed = self.client.query_consumer_offsets(group)
        if committed:
            self.client.remove_consumer_offsets(group, committed)
        for topic in (retry.retry_topic(group), retry.dlq_topic(group)):
            try:
                self.client.delete_topic(topic)
            except RmqError as error:
                if error.code != rmq_pb2.TOPIC_NOT_EXIST:
                    raise
        for name, settings in self.group_settings(group).items():
            if settings.stored:
                self.client.delete_subscription_group(name, group)
        return sorted({mq.topic for mq in committed})

    # ------------------------------------------------------------ dead letters

    def dead_letters(self, group: str, limit: int = PAGE_MAX, skip: int = 0,
                     unreachable: dict[str, RmqUnavailable] | None = None) -> list[MessageExt]:
        """The group's dead letters, oldest first: at most `limit` (PAGE_MAX) after the first `skip`
        (pages past the first); with `unreachable`, those of reachable brokers (the others recorded
        there), else RmqUnavailable when one is down."""
        ranges = ((mq, bounds.min_offset, bounds.max_offset)
                  for mq, bounds in self._offsets_if_exists(retry.dlq_topic(group), unreachable).items())
        return self._page(ranges, skip, max(1, min(limit, PAGE_MAX)))


def resend(client: RmqClient, message: MessageExt, group: str = "") -> str:
    """Publish a dead letter again with its body, tags, keys and properties: to its original
    topic (every group of that topic receives it again), or, with `group`, to that group's retry
    topic only (what RocketMQ's consumeMessageDirectly is for). Returns the topic written."""
    topic = retry.retry_topic(group) if group else message.topic
    properties = {k: v for k, v in message.properties.items() if k not in NOT_REPUBLISHED}
    if group:    # a retry copy names its original topic and first copy, as the broker's own do
        properties.setdefault(retry.PROPERTY_RETRY_TOPIC, message.topic)
        properties.setdefault(retry.PROPERTY_ORIGIN_MESSAGE_ID, message.origin_msg_id)
    client.send(topic, [OutgoingMessage(message.body, message.tags, message.keys, properties)])
    return topic


def parse_msg_id(msg_id: str) -> tuple[str, int]:
    """(store host `ip:port`, CommitLog offset) of an offset message id; ConfigError otherwise."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raw = b""
    if len(raw) != 16:
        raise ConfigError(f"{msg_id!r} is not a message id (32 hex digits: store host and CommitLog offset, "
                          "as `rmq consume` and the SDK show them)")
    host = ".".join(str(b) for b in raw[:4])
    port = int.from_bytes(raw[4:8], "big")
    return f"{host}:{port}", int.from_bytes(raw[8:], "big")
