"""CONSUMER_SEND_MSG_BACK (RocketMQ SendMessageProcessor#consumerSendMsgBack; spec
consumer-pull-rebalance §18, TV-14; consumption-longpolling-offsets §13.2, TV-11).

A consumer that could not process a message names it by its CommitLog offset. The broker
looks the record up and stores a new copy: in the group's retry topic `%RETRY%<group>`
(created on demand, 1 read/write queue) parked at a delay level (the client's when > 0, else
3 + reconsumeTimes), or in the group's dead-letter topic `%DLQ%<group>` (1 write-only queue)
when the client's level is negative or reconsumeTimes >= maxReconsumeTimes. The copy has
reconsumeTimes + 1 and keeps body, flag, tags, keys and properties, plus RETRY_TOPIC (the
original topic) and ORIGIN_MESSAGE_ID (the first copy's id), both set by the broker. The
original is never changed; a refused request writes nothing. On an `--acl` broker the record
at the offset must be one the caller may consume for the group (check_may_send_back)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from rmq import message_format as mf
from rmq import retry
from rmq.broker_server.errors import BrokerError, illegal_argument
from rmq.broker_server.metrics.broker_stats import BrokerStatsManager
from rmq.broker_server.offsets.subscription_group_manager import SubscriptionGroupManager
from rmq.broker_server.processors.delay_levels import delay_level_to_queue_id
from rmq.broker_server.processors.names import SCHEDULE_TOPIC, check_group_name, is_reserved_topic
from rmq.broker_server.processors.put_status import check_put_status
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.security import caller
from rmq.broker_server.security.acl import Need, ResourceKind
from rmq.store import GetMessageResult, MessageStore, MessageToStore
from rmq.stored_message import StoredMessage, decode_record, offset_msg_id
from rmq.topic_config import PERM_READ, PERM_WRITE
from rmq.v1 import rmq_pb2

RETRY_TOPIC_PERM = PERM_READ | PERM_WRITE
DLQ_TOPIC_PERM = PERM_WRITE   # nothing consumes a DLQ until someone intervenes


@dataclass(frozen=True)
class SendBackTarget:
    """Where the copy goes: the retry topic at `delay_level`, or the DLQ (level 0)."""

    topic: str
    delay_level: int

    @property
    def dead(self) -> bool:
        return self.delay_level == 0


def choose_target(group: str, client_level: int, reconsume_times: int, max_reconsume_times: int,
                  max_delay_level: int) -> SendBackTarget:
    """TV-14: DLQ for a negative level or too many attempts, else the retry topic at the
    client's level or 3 + reconsumeTimes, capped at the broker's highest level."""
    if retry.goes_to_dlq(client_level, reconsume_times, max_reconsume_times):
        return SendBackTarget(retry.dlq_topic(group), 0)
    level = retry.retry_delay_level(client_level, reconsume_times)
    return SendBackTarget(retry.retry_topic(group), min(level, max_delay_level))


def origin_of(message: StoredMessage) -> tuple[str, str]:
    """(original topic, original message id). A group's copy (in a retry or dead-letter topic,
    which only the broker writes) carries those the broker gave it; any other message is its own
    origin, whatever RETRY_TOPIC or ORIGIN_MESSAGE_ID its producer set (else `rmq dlq resend`,
    run by an operator, would publish where that producer could not: docs/security-model.md)."""
    if retry.is_group_copy_topic(message.topic):
        return (message.properties.get(retry.PROPERTY_RETRY_TOPIC) or message.topic,
                message.properties.get(retry.PROPERTY_ORIGIN_MESSAGE_ID) or offset_msg_id(message))
    return message.topic, offset_msg_id(message)


def check_may_send_back(group: str, topic: str, commit_log_offset: int) -> None:
    """The record found at the offset must be one the calling account may consume for `group`:
    in the group's own retry topic, or in a topic (not the broker's) it holds SUB on. The refusal
    tells nothing of the record (docs/security-model.md: send-back reads any topic)."""
    if topic == retry.retry_topic(group):
        return
    if not is_reserved_topic(topic) and caller.may(ResourceKind.TOPIC, topic, Need.SUB):
        return
    raise BrokerError(rmq_pb2.NO_PERMISSION, f"the message at CommitLog offset {commit_log_offset} is not "
                                              f"one consumer group {group} may consume")


def copies_the_caller_may_read(topic: str, result: GetMessageResult) -> GetMessageResult:
    """A read of `topic`'s records (a query by key) less, for a retry or dead-letter topic, the
    copies whose original topic (RETRY_TOPIC) the calling account may not consume: the copy is
    the original's data, so reading it needs what reading the original needs, as a send-back of
    it does (docs/security-model.md, "Group copies are read as their originals")."""
    if not retry.is_group_copy_topic(topic) or not result.message_count:
        return result
    records, at = [], 0
    for size in result.sizes.tolist():
        record = bytes(result.buffer[at : at + size])
        at += size
        origin = mf.record_properties(record).get(retry.PROPERTY_RETRY_TOPIC) or topic
        if origin == topic or caller.may(ResourceKind.TOPIC, origin, Need.SUB):
            records.append(record)
    if len(records) == result.message_count:
        return result
    sizes = np.array([len(record) for record in records], dtype=np.int32)
    return replace(result, message_count=len(records), sizes=sizes, buffer=b"".join(records))


def send_back_copy(message: StoredMessage, target: SendBackTarget,
                   max_reconsume_times: int) -> MessageToStore:
    """The new message (MessageExtBrokerInner) for `target`; a retry copy is parked in the
    schedule topic's queue for its level, like any delayed message (§19.1)."""
    properties = dict(message.properties)
    properties[retry.PROPERTY_RETRY_TOPIC], properties[retry.PROPERTY_ORIGIN_MESSAGE_ID] = origin_of(message)
    properties[retry.PROPERTY_MAX_RECONSUME_TIMES] = str(max_reconsume_times)
    for stale in (mf.PROPERTY_REAL_TOPIC, mf.PROPERTY_REAL_QUEUE_ID, mf.PROPERTY_DELAY_TIME_LEVEL):
        properties.pop(stale, None)
    topic, queue_id = target.topic, 0   # RETRY_QUEUE_NUMS = DLQ_NUMS_PER_GROUP = 1
    if not target.dead:
        properties[mf.PROPERTY_REAL_TOPIC] = topic
        properties[mf.PROPERTY_REAL_QUEUE_ID] = str(queue_id)
        properties[mf.PROPERTY_DELAY_TIME_LEVEL] = str(target.delay_level)
        topic, queue_id = SCHEDULE_TOPIC, delay_level_to_queue_id(target.delay_level)
    return MessageToStore.copy_of(message, topic, queue_id, properties, message.reconsume_times + 1)


def ensure_group_topic(topics: TopicConfigManager, topic: str, queue_nums: int, perm: int,
                       on_topics_changed: Callable[[], None]) -> None:
    """Create a group's retry or dead-letter topic unless it exists, announcing it."""
    if topics.get(topic) is None:
        topics.create_in_send_message_back(topic, queue_nums, perm)
        on_topics_changed()


def ensure_retry_topic(topics: TopicConfigManager, group: str, on_topics_changed: Callable[[], None]) -> None:
    """`%RETRY%<group>` with RocketMQ's queue count and permission (also created when a
    clustering consumer heartbeats, so its route exists before the first retry)."""
    ensure_group_topic(topics, retry.retry_topic(group), retry.RETRY_QUEUE_NUMS, RETRY_TOPIC_PERM,
                       on_topics_changed)


class ConsumerSendMsgBackProcessor:
    def __init__(self, store: MessageStore, topics: TopicConfigManager, executor: StoreExecutor,
                 max_delay_level: int, group_exists: Callable[[str], bool],
                 on_topics_changed: Callable[[], None], stats: BrokerStatsManager | None = None,
                 groups: SubscriptionGroupManager | None = None) -> None:
        """`group_exists(group)` says whether the broker knows the group (live consumers or
        committed offsets): RocketMQ's subscription group lookup. `on_topics_changed` announces
        a retry or dead-letter topic created here to the name servers; `stats` counts the
        messages moved to a dead-letter queue; `groups` holds the admins' per-group settings,
        whose retry_max_times, when an admin stored one, decides over the client's."""
        self.store = store
        self.topics = topics
        self.executor = executor
        self.max_delay_level = max_delay_level
        self.group_exists = group_exists
        self.on_topics_changed = on_topics_changed
        self.stats = stats
        self.groups = groups

    async def store_copy(self, group: str, message: StoredMessage, target: SendBackTarget,
                         max_times: int) -> None:
        """Store the copy of `message` `group` sends back in the group's retry topic or DLQ
        (created when missing), counting a move to the DLQ: the one send-back of rmq.v1, 4.x and
        RocketMQ 5 consumers (a pop delivery past its max attempts)."""
        if target.dead:
            ensure_group_topic(self.topics, target.topic, retry.DLQ_NUMS_PER_GROUP, DLQ_TOPIC_PERM,
                               self.on_topics_changed)
        else:
            ensure_retry_topic(self.topics, group, self.on_topics_changed)
        copy = send_back_copy(message, target, max_times)
        result = await self.executor.run(self.store.put_message, copy)
        check_put_status(result.status)
        if target.dead and self.stats is not None:
            self.stats.record_send_to_dlq(copy.properties[retry.PROPERTY_RETRY_TOPIC], group,
                                          caller.account_key())

    def _max_times(self, request: rmq_pb2.ConsumerSendMsgBackRequest) -> int:
        """The group's stored retry_max_times (RocketMQ 5: the group's retry policy decides), else
        the client's max_reconsume_times, else RocketMQ's default 16."""
        settings = self.groups.find(request.consumer_group) if self.groups is not None else None
        if settings is not None:
            return settings.retry_max_times
        if request.HasField("max_reconsume_times"):
            return request.max_reconsume_times
        return retry.DEFAULT_MAX_RECONSUME_TIMES

    async def process(
        self, request: rmq_pb2.ConsumerSendMsgBackRequest
    ) -> rmq_pb2.ConsumerSendMsgBackResponse:
        group = request.consumer_group
        check_group_name(group)
        if not self.group_exists(group):
            raise BrokerError(rmq_pb2.SUBSCRIPTION_GROUP_NOT_EXIST, f"subscription group not exist, {group}")
        max_times = self._max_times(request)
        if max_times < 0:
            raise illegal_argument(f"max_reconsume_times must not be negative, not {max_times}")
        record = await self.executor.run(self.store.look_message_by_offset, request.commit_log_offset)
        if record is None:
            raise BrokerError(rmq_pb2.SYSTEM_ERROR,
                               f"look message by offset failed, {request.commit_log_offset}")
        message = decode_record(record)
        check_may_send_back(group, message.topic, request.commit_log_offset)
        target = choose_target(group, request.delay_level, message.reconsume_times, max_times,
                               self.max_delay_level)
        await self.store_copy(group, message, target, max_times)
        return rmq_pb2.ConsumerSendMsgBackResponse(
            status=rmq_pb2.Status(code=rmq_pb2.OK), topic=target.topic, delay_level=target.delay_level)
