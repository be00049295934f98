"""MessagingService: the broker's gRPC face for producers and consumers, translating rmq.v1
messages to the processors and managers and back."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterable

from rmq.broker_server.errors import BrokerError, illegal_argument
from rmq.broker_server.grpc_aio import Context
from rmq.broker_server.offsets.consumer_ids_watch import ConsumerIdsWatchService
from rmq.broker_server.offsets.consumer_manager import ConsumerManager
from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager, OffsetKey
from rmq.broker_server.offsets.rebalance_lock_manager import RebalanceLockManager
from rmq.broker_server.processors.consumer_send_msg_back import (
    ConsumerSendMsgBackProcessor,
    copies_the_caller_may_read,
    ensure_retry_topic,
)
from rmq.broker_server.processors.names import check_group_name
from rmq.broker_server.processors.pull_message_processor import (
    MAX_SUB_EXPRESSION_LENGTH,
    PullMessageProcessor,
    pack_messages,
)
from rmq.broker_server.processors.send_message_processor import SendMessageProcessor
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.rmq_v1.status import OK, answers_with_status
from rmq.broker_server.security.caller import account_key
from rmq.message_queue import MessageQueue
from rmq.store import BrokerRole, MessageStore
from rmq.topic_config import TopicConfig
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

QUERY_MESSAGE_MAX = 64  # RocketMQ maxMsgsNumBatch


def check_queue(config: TopicConfig, queue_id: int) -> None:
    if not 0 <= queue_id < config.read_queue_nums:
        raise illegal_argument(
            f"queue_id {queue_id} is out of range: topic {config.topic_name!r} has "
            f"{config.read_queue_nums} read queues"
        )


def check_client_id(client_id: str) -> None:
    if not client_id:
        raise illegal_argument("client_id is empty")


def to_message_queues(queues: Iterable[rmq_pb2.MessageQueue]) -> list[MessageQueue]:
    return [MessageQueue(mq.topic, mq.broker_name, mq.queue_id) for mq in queues]


class MessagingService(rmq_pb2_grpc.MessagingServiceServicer):
    def __init__(
        self,
        store: MessageStore,
        executor: StoreExecutor,
        topics: TopicConfigManager,
        send_processor: SendMessageProcessor,
        pull_processor: PullMessageProcessor,
        offsets: ConsumerOffsetManager,
        consumers: ConsumerManager,
        locks: RebalanceLockManager,
        send_back_processor: ConsumerSendMsgBackProcessor,
        watches: ConsumerIdsWatchService,
    ) -> None:
        self.store = store
        self.executor = executor
        self.topics = topics
        self.send_processor = send_processor
        self.pull_processor = pull_processor
        self.offsets = offsets
        self.consumers = consumers
        self.locks = locks
        self.send_back_processor = send_back_processor
        self.watches = watches

    @answers_with_status(rmq_pb2.SendMessageResponse)
    async def SendMessage(self, request: rmq_pb2.SendMessageRequest,
                          context: Context) -> rmq_pb2.SendMessageResponse:
        return await self.send_processor.process(request, context.peer())

    @answers_with_status(rmq_pb2.PullMessageResponse)
    async def PullMessage(self, request: rmq_pb2.PullMessageRequest,
                          context: Context) -> rmq_pb2.PullMessageResponse:
        return await self.pull_processor.process(request, lease=self.pull_processor.budget.lease(context))

    @answers_with_status(rmq_pb2.GetTopicOffsetsResponse)
    async def GetTopicOffsets(self, request: rmq_pb2.GetTopicOffsetsRequest,
                              context: Context) -> rmq_pb2.GetTopicOffsetsResponse:
        config = self.topics.require(request.topic)
        queues = await self.executor.run(self._queue_offsets, config)
        return rmq_pb2.GetTopicOffsetsResponse(status=OK, queues=queues)

    def _queue_offsets(self, config: TopicConfig) -> list[rmq_pb2.QueueOffsets]:
        topic = config.topic_name
        return [
            rmq_pb2.QueueOffsets(
                queue_id=queue_id,
                min_offset=self.store.get_min_offset_in_queue(topic, queue_id),
                max_offset=self.store.get_max_offset_in_queue(topic, queue_id),
                last_store_timestamp=self.store.get_last_store_timestamp(topic, queue_id),
            )
            for queue_id in range(config.read_queue_nums)
        ]

    @answers_with_status(rmq_pb2.SearchOffsetResponse)
    async def SearchOffset(self, request: rmq_pb2.SearchOffsetRequest,
                           context: Context) -> rmq_pb2.SearchOffsetResponse:
        check_queue(self.topics.require(request.topic), request.queue_id)
        offset = await self.executor.run(
            self.store.get_offset_in_queue_by_time, request.topic, request.queue_id, request.timestamp
        )
        return rmq_pb2.SearchOffsetResponse(status=OK, offset=offset)

    @answers_with_status(rmq_pb2.QueryConsumerOffsetsResponse)
    async def QueryConsumerOffsets(self, request: rmq_pb2.QueryConsumerOffsetsRequest,
                                   context: Context) -> rmq_pb2.QueryConsumerOffsetsResponse:
        check_group_name(request.consumer_group)
        if request.topic:
            self.topics.require(request.topic)
        found = self.offsets.query_offsets(request.consumer_group, request.topic)
        return rmq_pb2.QueryConsumerOffsetsResponse(
            status=OK,
            offsets=[
                rmq_pb2.ConsumerOffset(topic=key.topic, queue_id=key.queue_id, offset=offset)
                for key, offset in found.items()
            ],
        )

    @answers_with_status(rmq_pb2.UpdateConsumerOffsetsResponse)
    async def UpdateConsumerOffsets(
            self, request: rmq_pb2.UpdateConsumerOffsetsRequest,
            context: Context) -> rmq_pb2.UpdateConsumerOffsetsResponse:
        check_group_name(request.consumer_group)
        for entry in request.offsets:  # all checked before any is stored
            check_queue(self.topics.require(entry.topic), entry.queue_id)
            if entry.offset < 0:
                raise illegal_argument(
                    f"offset for {entry.topic} queue {entry.queue_id} must not be negative, "
                    f"not {entry.offset}"
                )
        self.offsets.commit_client_offsets(
            account_key(),
            {OffsetKey(request.consumer_group, entry.topic, entry.queue_id): entry.offset
             for entry in request.offsets},
            increase_only=request.increase_only)
        return rmq_pb2.UpdateConsumerOffsetsResponse(status=OK)

    @answers_with_status(rmq_pb2.RemoveConsumerOffsetsResponse)
    async def RemoveConsumerOffsets(
            self, request: rmq_pb2.RemoveConsumerOffsetsRequest,
            context: Context) -> rmq_pb2.RemoveConsumerOffsetsResponse:
        check_group_name(request.consumer_group)
        for entry in request.offsets:
            self.offsets.remove_offset(request.consumer_group, entry.topic, entry.queue_id)
        return rmq_pb2.RemoveConsumerOffsetsResponse(status=OK)

    @answers_with_status(rmq_pb2.HeartbeatResponse)
    async def Heartbeat(self, request: rmq_pb2.HeartbeatRequest,
                        context: Context) -> rmq_pb2.HeartbeatResponse:
        check_client_id(request.client_id)
        check_group_name(request.consumer_group)
        if request.message_model not in rmq_pb2.MessageModel.values():
            raise illegal_argument(f"message_model {request.message_model} is not CLUSTERING or BROADCASTING")
        subscriptions = {s.topic: s.sub_expression for s in request.subscriptions}
        for topic, expression in subscriptions.items():
            if len(expression) > MAX_SUB_EXPRESSION_LENGTH:
                raise illegal_argument(f"sub_expression of {topic!r} is longer than "
                                       f"{MAX_SUB_EXPRESSION_LENGTH} characters")
        clustering = request.message_model == rmq_pb2.CLUSTERING
        if clustering and self.consumers.admits_group(request.consumer_group):
            # ClientManageProcessor#heartBeat: the group's retry topic exists before any retry
            # (a group too long to prefix has none: its send-backs are refused TOPIC_ILLEGAL).
            # Only for a group the consumer table admits, so max_consumer_groups also bounds the
            # retry topics heartbeats create.
            with contextlib.suppress(BrokerError):
                ensure_retry_topic(
                    self.topics, request.consumer_group, self.send_back_processor.on_topics_changed
                )
        self.consumers.heartbeat(
            request.client_id, request.consumer_group, request.message_model, subscriptions,
            # a 4.x remoting call's context says so; a gRPC call is an rmq.v1 client
            protocol=getattr(context, "client_protocol", rmq_pb2.CLIENT_PROTOCOL_RMQ),
            address=context.peer() if context is not None else "",
        )
        return rmq_pb2.HeartbeatResponse(status=OK)

    @answers_with_status(rmq_pb2.UnregisterClientResponse)
    async def UnregisterClient(self, request: rmq_pb2.UnregisterClientRequest,
                               context: Context) -> rmq_pb2.UnregisterClientResponse:
        check_client_id(request.client_id)
        check_group_name(request.consumer_group)
        self.consumers.unregister(request.client_id, request.consumer_group)
        return rmq_pb2.UnregisterClientResponse(status=OK)

    @answers_with_status(rmq_pb2.GetConsumerListResponse)
    async def GetConsumerList(self, request: rmq_pb2.GetConsumerListRequest,
                              context: Context) -> rmq_pb2.GetConsumerListResponse:
        check_group_name(request.consumer_group)
        client_ids = self.consumers.consumer_list(request.consumer_group)
        return rmq_pb2.GetConsumerListResponse(status=OK, client_ids=client_ids)

    @answers_with_status(rmq_pb2.LockBatchResponse)
    async def LockBatchMQ(self, request: rmq_pb2.LockBatchRequest,
                          context: Context) -> rmq_pb2.LockBatchResponse:
        check_client_id(request.client_id)
        check_group_name(request.consumer_group)
        if self.store.config.broker_role is BrokerRole.SLAVE:
            # spec consumer-startup-allocation-ordering §6.2: locks live on the master only; a
            # slave offers none, so ordered queues wait for their master.
            return rmq_pb2.LockBatchResponse(status=OK)
        for mq in request.queues:   # only real queues take a place in the lock table
            check_queue(self.topics.require(mq.topic), mq.queue_id)
        locked = self.locks.try_lock_batch(
            request.consumer_group, to_message_queues(request.queues), request.client_id
        )
        return rmq_pb2.LockBatchResponse(
            status=OK,
            locked_queues=[
                rmq_pb2.MessageQueue(topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id)
                for mq in sorted(locked)
            ],
        )

    @answers_with_status(rmq_pb2.UnlockBatchResponse)
    async def UnlockBatchMQ(self, request: rmq_pb2.UnlockBatchRequest,
                            context: Context) -> rmq_pb2.UnlockBatchResponse:
        check_client_id(request.client_id)
        check_group_name(request.consumer_group)
        self.locks.unlock_batch(request.consumer_group, to_message_queues(request.queues), request.client_id)
        return rmq_pb2.UnlockBatchResponse(status=OK)

    @answers_with_status(rmq_pb2.QueryMessageByKeyResponse)
    async def QueryMessageByKey(self, request: rmq_pb2.QueryMessageByKeyRequest,
                                context: Context) -> rmq_pb2.QueryMessageByKeyResponse:
        self.topics.require(request.topic)
        if not request.key:
            raise illegal_argument("key is empty")
        if request.max_messages <= 0:
            raise illegal_argument(f"max_messages must be positive, not {request.max_messages}")
        end = request.end_timestamp or int(time.time() * 1000)
        result = await self.executor.run(
            self.store.query_message_by_key,
            request.topic,
            request.key,
            min(request.max_messages, QUERY_MESSAGE_MAX),
            request.begin_timestamp,
            end,
        )
        response = rmq_pb2.QueryMessageByKeyResponse(status=OK)
        pack_messages(response.messages, copies_the_caller_may_read(request.topic, result))
        return response

    @answers_with_status(rmq_pb2.ConsumerSendMsgBackResponse)
    async def ConsumerSendMsgBack(self, request: rmq_pb2.ConsumerSendMsgBackRequest,
                                  context: Context) -> rmq_pb2.ConsumerSendMsgBackResponse:
        return await self.send_back_processor.process(request)

    async def WatchConsumerIds(
            self, request: rmq_pb2.WatchConsumerIdsRequest,
            context: Context) -> AsyncIterator[rmq_pb2.ConsumerIdsChanged]:
        try:
            check_client_id(request.client_id)
            check_group_name(request.consumer_group)
        except BrokerError as error:
            yield rmq_pb2.ConsumerIdsChanged(status=error.status())
            return
        async for event in self.watches.watch(request.consumer_group, request.client_id):
            yield event
