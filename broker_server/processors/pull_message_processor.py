"""PullMessage (RocketMQ PullMessageProcessor, spec consumer-pull-rebalance §11-§13,
consumption-longpolling-offsets §6-§7): validate the request, read from the store, map the
store's GetMessageStatus to the client's PullStatus, store a piggy-backed commit offset, and
hold the pull (long polling) when there is nothing new and the request allows suspending.

Messages travel as one `PackedMessages`: the store's records back to back and their sizes
as little-endian int32, with no per-message Python work on this path.

Memory: a pull reads at most `max_pull_bytes` on one of the `store_threads` executor threads,
so reads in progress hold at most store_threads x max_pull_bytes (8 x 48 MiB by default). A
held pull woken with at most INLINE_MESSAGES new messages reads them on the event loop
itself (no executor hop, one GIL hand-off less per wake), and so does any pull of at most
INLINE_MESSAGES messages without a filter whose records hold at most INLINE_BYTES and lie in
memory (MessageStore.is_small_read_in_memory): the hop costs more CPU than such a read
(≈ 70 µs against ≈ 55 µs for 32 records of 100 B, bench/NOTES.md issue 29 third pass); one
such read at a time. An SQL92 pull
never reads on the event loop: it reads on the FilterExecutor, one slice of filter work per read,
in its account's turn (filter_executor, docs/filtering-and-bounds.md). An answer then
stays in the process until its call ends: a call's PullBytesLease grants each read at most what
is left of the PullResponseBudget (max_inflight_pull_bytes, per connection and in all)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from rmq import message_format as mf
from rmq import subscription
from rmq.broker_server.errors import BrokerError, illegal_argument
from rmq.broker_server.long_polling.pull_request_hold_service import HoldTableFull, PullRequestHoldService
from rmq.broker_server.metrics.broker_stats import BrokerStatsManager
from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager, OffsetKey
from rmq.broker_server.offsets.subscription_group_manager import SubscriptionGroupManager
from rmq.broker_server.processors.filter_executor import FilterExecutor, slice_evaluations
from rmq.broker_server.processors.names import check_group_name
from rmq.broker_server.processors.pull_response_budget import PullBytesLease, PullResponseBudget
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.security.caller import account_key
from rmq.broker_server.security.refusal_log import RefusalLog
from rmq.broker_server.security.request_auth import key_label
from rmq.broker_server.status import OK
from rmq.mix_all import MASTER_ID
from rmq.record_columns import RecordParts
from rmq.sql92 import Sql92Error, Sql92Filter, compile_sql92
from rmq.statuses import GetMessageStatus, PullStatus
from rmq.store import BrokerRole, MessageStore
from rmq.store.results import GetMessageResult
from rmq.v1 import rmq_pb2

MAX_SUB_EXPRESSION_LENGTH = 65536
INLINE_MESSAGES = 32        # a pull reading at most this many messages may read on the event loop
INLINE_BYTES = 256 * 1024   # ... when it is woken, or its records hold at most this many bytes
WHICH_BROKER_WHEN_CONSUME_SLOWLY = 1   # subscriptionGroupConfig.whichBrokerWhenConsumeSlowly default
KNOWN_SYS_FLAGS = rmq_pb2.FLAG_COMMIT_OFFSET | rmq_pb2.FLAG_SUSPEND | rmq_pb2.FLAG_SUBSCRIPTION

# Spec consumer-pull-rebalance §13 / consumption-longpolling-offsets §7.1, composed with the
# client's ResponseCode -> PullStatus (§7.2). NO_MATCHED_LOGIC_QUEUE and NO_MESSAGE_IN_QUEUE
# depend on the requested offset (see pull_status).
_PULL_STATUS = {
    GetMessageStatus.FOUND: PullStatus.FOUND,  # SUCCESS
    GetMessageStatus.NO_MATCHED_MESSAGE: PullStatus.NO_MATCHED_MSG,  # PULL_RETRY_IMMEDIATELY
    GetMessageStatus.MESSAGE_WAS_REMOVING: PullStatus.NO_MATCHED_MSG,  # PULL_RETRY_IMMEDIATELY
    GetMessageStatus.OFFSET_FOUND_NULL: PullStatus.NO_NEW_MSG,  # PULL_NOT_FOUND
    GetMessageStatus.OFFSET_OVERFLOW_ONE: PullStatus.NO_NEW_MSG,  # PULL_NOT_FOUND
    GetMessageStatus.OFFSET_OVERFLOW_BADLY: PullStatus.OFFSET_ILLEGAL,  # PULL_OFFSET_MOVED
    GetMessageStatus.OFFSET_TOO_SMALL: PullStatus.OFFSET_ILLEGAL,  # PULL_OFFSET_MOVED
}
_NO_QUEUE_DATA = frozenset({GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, GetMessageStatus.NO_MESSAGE_IN_QUEUE})


def pull_status(store_status: GetMessageStatus, request_offset: int) -> PullStatus:
    """The client's PullStatus for the store's GetMessageStatus: "the broker store no queue
    data" is PULL_OFFSET_MOVED unless the request asked for offset 0."""
    if store_status in _NO_QUEUE_DATA:
        return PullStatus.OFFSET_ILLEGAL if request_offset != 0 else PullStatus.NO_NEW_MSG
    return _PULL_STATUS[store_status]


# Expressions come from clients (up to MAX_SUB_EXPRESSION_LENGTH each): the cache is bounded.
SUB_EXPRESSION_CACHE_SIZE = 1024


@functools.lru_cache(maxsize=SUB_EXPRESSION_CACHE_SIZE)
def sub_expression_tag_codes(expression: str) -> frozenset[int] | None:
    """Tag hash codes of "TagA || TagB" (rmq.subscription.tag_codes, lenient); None matches
    every message."""
    return subscription.tag_codes(expression)


@dataclass(frozen=True)
class Sql92RecordFilter:
    """MessageFilter#isMatchedByCommitLog for an SQL92 subscription (spec
    consumption-longpolling-offsets §10): the expression evaluated on a stored record's properties
    (a RecordFilter), and how many records one FilterExecutor slice evaluates with it."""

    compiled: Sql92Filter

    def __call__(self, record: bytes) -> bool:
        return self.compiled.matches(mf.record_properties(record))

    @property
    def slice_evaluations(self) -> int:
        return slice_evaluations(self.compiled.cost)


def sql92_record_filter(expression: str) -> Sql92RecordFilter:
    """The filter of an SQL92 subscription; compile_sql92 keeps the compiled expressions (bounded);
    raises Sql92Error for a malformed one."""
    return Sql92RecordFilter(compile_sql92(expression))


@dataclass(frozen=True)
class PullQuery:
    group: str
    topic: str
    queue_id: int
    offset: int
    max_messages: int
    max_bytes: int
    tag_codes: frozenset[int] | None
    suspend: bool
    suspend_timeout_ms: int
    record_filter: Sql92RecordFilter | None = None   # SQL92 subscriptions


@dataclass(frozen=True)
class PullLimits:
    max_messages: int
    default_max_bytes: int
    max_bytes: int


class PullMessageProcessor:
    def __init__(
        self,
        store: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        hold_service: PullRequestHoldService,
        executor: StoreExecutor,
        limits: PullLimits,
        stats: BrokerStatsManager,
        filters: FilterExecutor,
        enable_property_filter: bool = True,
        budget: PullResponseBudget | None = None,
        refusals: RefusalLog | None = None,
        groups: SubscriptionGroupManager | None = None,
    ) -> None:
        """`groups`: the admins' per-group settings (a group whose consume is disabled is refused)."""
        self.store = store
        self.groups = groups
        self.filters = filters
        self.refusals = refusals or RefusalLog()
        self.stats = stats
        self.enable_property_filter = enable_property_filter
        self.topics = topics
        self.offsets = offsets
        self.hold_service = hold_service
        self.executor = executor
        self.limits = limits
        # unbounded unless given (in-process users; the broker gives its configured one)
        self.budget = budget or PullResponseBudget(1 << 62, 1 << 62)

    async def process(
        self, request: rmq_pb2.PullMessageRequest, broker_allow_suspend: bool = True,
        lease: PullBytesLease | None = None,
    ) -> rmq_pb2.PullMessageResponse:
        """`lease`: the call's (see get_message)."""
        try:
            query = self.parse(request)
            inline = self._reads_inline(query, woken=not broker_allow_suspend)
            response = await self.get_message(query, inline=inline, lease=lease)
        except BrokerError as error:     # a bad request, or the lease has no bytes left
            return rmq_pb2.PullMessageResponse(status=error.status())
        if broker_allow_suspend and request.sys_flag & rmq_pb2.FLAG_COMMIT_OFFSET:
            # §6 step 9, except that slaves store it too: clients commit where they read while the
            # master is down (docs/replication.md) and SlaveSynchronize hands it to the master.
            self._commit_offset(query, request.commit_offset)
        if broker_allow_suspend and query.suspend and response.pull_status == rmq_pb2.NO_NEW_MSG:
            try:
                return await self._hold(request, query, lease)
            except HoldTableFull as error:
                return rmq_pb2.PullMessageResponse(status=error.status())
        return response

    def _commit_offset(self, query: PullQuery, offset: int) -> None:
        """Store a piggy-backed commit; one past max_consumer_offsets (or the account's share) is
        dropped, written to the rate-limited refusal log: the pull is still answered, and the
        client's next UpdateConsumerOffsets is refused with the reason."""
        account = account_key()
        try:
            key = OffsetKey(query.group, query.topic, query.queue_id)
            self.offsets.commit_client_offsets(account, {key: offset})
        except BrokerError as error:
            self.refusals.record("PullMessage commit", f"account {key_label(account)}",
                                 rmq_pb2.Code.Name(error.code), f"group {query.group}: {error.message}")

    async def _hold(self, request: rmq_pb2.PullMessageRequest, query: PullQuery,
                    lease: PullBytesLease | None) -> rmq_pb2.PullMessageResponse:
        """Hold the pull, then run it again answering whatever is there (executeRequestWhenWakeup).
        Arrivals wake an SQL92 pull whatever their properties (the ConsumeQueue has no properties);
        when the re-run found only messages its filter rejects, it is held again from past them for
        the rest of its time, so it is answered only for a matching message or at its timeout."""
        started = time.monotonic()
        await self.hold_service.suspend(
            query.topic, query.queue_id, query.offset, query.tag_codes, query.suspend_timeout_ms
        )
        woken = await self.process(request, broker_allow_suspend=False, lease=lease)
        remaining_ms = query.suspend_timeout_ms - int((time.monotonic() - started) * 1000)
        if query.record_filter is None or woken.pull_status != rmq_pb2.NO_MATCHED_MSG or remaining_ms <= 0:
            return woken
        again = rmq_pb2.PullMessageRequest()
        again.CopyFrom(request)
        again.queue_offset = woken.next_begin_offset
        again.suspend_timeout_ms = remaining_ms
        again.sys_flag &= ~rmq_pb2.FLAG_COMMIT_OFFSET     # committed once already
        return await self.process(again, lease=lease)

    def parse(self, request: rmq_pb2.PullMessageRequest) -> PullQuery:
        """Validate every field, naming the bad one; clamp batch limits to the broker's."""
        check_group_name(request.consumer_group)
        if self.groups is not None:
            self.groups.check_consume_enabled(request.consumer_group)
        config = self.topics.require(request.topic)
        if not config.readable:
            raise BrokerError(
                rmq_pb2.NO_PERMISSION, f"the topic[{request.topic}] pulling message is forbidden"
            )
        if not 0 <= request.queue_id < config.read_queue_nums:
            raise illegal_argument(
                f"queue_id {request.queue_id} is out of range: topic {request.topic!r} has "
                f"{config.read_queue_nums} read queues"
            )
        if request.queue_offset < 0:
            raise illegal_argument(f"queue_offset must not be negative, not {request.queue_offset}")
        if request.max_messages <= 0:
            raise illegal_argument(f"max_messages must be positive, not {request.max_messages}")
        if request.max_bytes < 0:
            raise illegal_argument(f"max_bytes must not be negative, not {request.max_bytes}")
        if request.sys_flag & ~KNOWN_SYS_FLAGS or request.sys_flag < 0:
            raise illegal_argument(
                f"sys_flag {request.sys_flag} has unsupported bits (class filter is not supported)"
            )
        suspend = bool(request.sys_flag & rmq_pb2.FLAG_SUSPEND)
        if suspend and request.suspend_timeout_ms < 0:
            raise illegal_argument(
                f"suspend_timeout_ms must not be negative, not {request.suspend_timeout_ms}"
            )
        if request.sys_flag & rmq_pb2.FLAG_COMMIT_OFFSET and request.commit_offset < 0:
            raise illegal_argument(f"commit_offset must not be negative, not {request.commit_offset}")
        if len(request.sub_expression) > MAX_SUB_EXPRESSION_LENGTH:
            raise illegal_argument(f"sub_expression is longer than {MAX_SUB_EXPRESSION_LENGTH} characters")
        sql = request.expression_type == rmq_pb2.SQL92
        return PullQuery(
            group=request.consumer_group,
            topic=request.topic,
            queue_id=request.queue_id,
            offset=request.queue_offset,
            max_messages=min(request.max_messages, self.limits.max_messages),
            max_bytes=min(request.max_bytes or self.limits.default_max_bytes, self.limits.max_bytes),
            tag_codes=None if sql else sub_expression_tag_codes(request.sub_expression),
            suspend=suspend,
            suspend_timeout_ms=request.suspend_timeout_ms,
            record_filter=self._sql92_filter(request.sub_expression) if sql else None,
        )

    def _sql92_filter(self, expression: str) -> Sql92RecordFilter:
        if not self.enable_property_filter:
            raise BrokerError(rmq_pb2.FILTER_NOT_SUPPORTED,
                               "the broker does not support filtering messages by SQL92 "
                               "(enable_property_filter is off)")
        try:
            return sql92_record_filter(expression)
        except Sql92Error as error:
            raise BrokerError(rmq_pb2.SUBSCRIPTION_PARSE_FAILED, str(error)) from None

    def browse_query(self, request: rmq_pb2.BrowseMessagesRequest) -> PullQuery:
        """An admin read of any existing topic's queue, permission aside, never held."""
        config = self.topics.get(request.topic)
        if config is None:
            raise BrokerError(rmq_pb2.TOPIC_NOT_EXIST, f"topic {request.topic!r} does not exist")
        if not 0 <= request.queue_id < config.read_queue_nums:
            raise illegal_argument(
                f"queue_id {request.queue_id} is out of range: topic {request.topic!r} has "
                f"{config.read_queue_nums} queues"
            )
        if request.offset < 0 or request.max_messages <= 0:
            raise illegal_argument("offset must not be negative and max_messages must be positive")
        return PullQuery(group="", topic=request.topic, queue_id=request.queue_id, offset=request.offset,
                         max_messages=min(request.max_messages, self.limits.max_messages),
                         max_bytes=self.limits.default_max_bytes, tag_codes=None, suspend=False,
                         suspend_timeout_ms=0)

    def _reads_inline(self, query: PullQuery, woken: bool) -> bool:
        """Whether the read runs on the event loop: never with an SQL92 filter; a woken pull when
        the queue holds at most INLINE_MESSAGES messages from its offset; any pull of at most
        INLINE_MESSAGES without a tag filter whose records are few bytes in memory."""
        if query.record_filter is not None:
            return False
        if woken and (self.store.get_max_offset_in_queue(query.topic, query.queue_id) - query.offset
                      <= INLINE_MESSAGES):
            return True
        return (query.tag_codes is None and query.max_messages <= INLINE_MESSAGES
                and self.store.is_small_read_in_memory(query.topic, query.queue_id, query.offset,
                                                      query.max_messages, min(query.max_bytes, INLINE_BYTES)))

    async def get_message(self, query: PullQuery, inline: bool = False,
                          lease: PullBytesLease | None = None) -> rmq_pb2.PullMessageResponse:
        """Read on an executor thread, or on the calling (event loop) thread when `inline`, at most
        the bytes `lease` grants (InflightPullBytesExceeded when none come free). Without a lease
        the caller holds the answer only for a moment (in-process callers)."""
        max_bytes = await lease.grant(query.max_bytes) if lease else query.max_bytes
        answer_bytes = 0
        try:
            result = await self._read(query, max_bytes, inline)
            answer_bytes = len(result.buffer) + 4 * result.message_count   # records and sizes
        finally:
            if lease:
                lease.settle(max_bytes, answer_bytes)
        return self._answer(query, result)

    async def read(self, query: PullQuery) -> GetMessageResult:
        """The store's answer to `query`, read on an executor thread (SQL92 filters in the account's
        turn): the one read of every consumption path (rmq.v1 and RocketMQ 5 pulls, RocketMQ 5
        receives). `query.max_bytes` 0: the store's max_transfer_bytes."""
        return await self._read(query, query.max_bytes, inline=False)

    async def first_offset(self, topic: str, queue_id: int) -> int:
        """The queue's first offset (its min offset), read on an executor thread."""
        return await self.executor.run(self.store.get_min_offset_in_queue, topic, queue_id)

    def range_reader(self, query: PullQuery, offset: int, end_offset: int, max_rows: int,
                     max_bytes: int, parts: RecordParts | None = None) -> Callable[[], GetMessageResult]:
        """One read of [offset, end_offset) of the query's queue, up to `max_rows` and `max_bytes`
        (the Flight data plane's RecordBatch), for the caller to run on its stream's thread or,
        with an SQL92 filter, on the FilterExecutor; `parts`: those parts of the records,
        column-wise (MessageStore.get_queue_range)."""
        record_filter = query.record_filter
        return functools.partial(
            self.store.get_queue_range, query.topic, query.queue_id, offset, end_offset, max_rows, max_bytes,
            query.tag_codes, record_filter,
            max_filter_evaluations=None if record_filter is None else record_filter.slice_evaluations,
            parts=parts)

    async def _read(self, query: PullQuery, max_bytes: int, inline: bool) -> GetMessageResult:
        read = functools.partial(
            self.store.get_message,
            query.group,
            query.topic,
            query.queue_id,
            query.offset,
            query.max_messages,
            max_total_bytes=max_bytes,
            tag_codes=query.tag_codes,
            record_filter=query.record_filter,
            max_filter_evaluations=query.record_filter.slice_evaluations if query.record_filter else None,
        )
        if query.record_filter is not None:
            return await self.filters.run(account_key(), read)
        return read() if inline else await self.executor.run(read)

    def _answer(self, query: PullQuery, result: GetMessageResult) -> rmq_pb2.PullMessageResponse:
        if result.message_count and query.group:      # a consumer's pull, not an admin's browse
            self.stats.record_get(query.topic, result.message_count, len(result.buffer), query.group,
                                  account_key())
        response = self.progress(query, result)
        pack_messages(response.messages, result)
        return response

    def progress(self, query: PullQuery, result: GetMessageResult) -> rmq_pb2.PullMessageResponse:
        """The answer to a read of `query` that found `result`, without its messages."""
        return rmq_pb2.PullMessageResponse(
            status=OK,
            pull_status=cast(rmq_pb2.PullStatus, pull_status(result.status, query.offset)),   # wire values
            store_status=cast(rmq_pb2.GetMessageStatus, result.status),
            next_begin_offset=result.next_begin_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
            suggest_which_broker_id=self._suggest_which_broker_id(result.suggest_pulling_from_slave),
        )

    def _suggest_which_broker_id(self, suggest_pulling_from_slave: bool) -> int:
        """A master whose data to read has left memory sends the client to a slave (spec
        consumer-pull-rebalance §12.4, TV-6); a slave always names the master."""
        if suggest_pulling_from_slave and self.store.config.broker_role is not BrokerRole.SLAVE:
            return WHICH_BROKER_WHEN_CONSUME_SLOWLY
        return MASTER_ID


def pack_messages(packed: rmq_pb2.PackedMessages, result: GetMessageResult) -> None:
    """Fill `packed` from a store GetMessageResult: the records as they are, sizes as
    little-endian int32 (rmq.proto PackedMessages)."""
    if result.message_count:
        packed.count = result.message_count
        packed.sizes = result.sizes.astype("<i4", copy=False).tobytes()
        packed.records = bytes(result.buffer)   # a gathered read is a memoryview
