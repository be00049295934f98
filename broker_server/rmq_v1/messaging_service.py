"""MessagingService: the broker's rmq.v1 gRPC face for producers and consumers. It only
translates: each rmq.v1 request into a call of the processor that serves its kind
(processors/pipeline.py) and the answer back into the rmq.v1 response."""

from __future__ import annotations

from collections.abc import AsyncIterator

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.grpc_aio import Context
from rmq.broker_server.processors.admin_broker_processor import to_message_queues
from rmq.broker_server.processors.pipeline import BrokerProcessors
from rmq.broker_server.processors.pull_message_processor import pack_messages
from rmq.broker_server.processors.send_message_processor import OneMessage, born_host_from_peer
from rmq.broker_server.status import OK, answers_with_status
from rmq.v1 import rmq_pb2, rmq_pb2_grpc


def one_message(topic: str, message: rmq_pb2.Message) -> OneMessage:
    """An rmq.v1 Message as the single-message path's OneMessage."""
    return OneMessage(topic, message.body, message.tags, message.keys, message.properties,
                      message.queue_id if message.HasField("queue_id") else -1, message.delay_level,
                      message.flag, message.born_timestamp)


class MessagingService(rmq_pb2_grpc.MessagingServiceServicer):
    def __init__(self, processors: BrokerProcessors) -> None:
        self.processors = processors

    @answers_with_status(rmq_pb2.SendMessageResponse)
    async def SendMessage(self, request: rmq_pb2.SendMessageRequest,
                          context: Context) -> rmq_pb2.SendMessageResponse:
        send = self.processors.send
        if len(request.messages) != 1 or request.HasField("columns"):
            return await send.process(request, context.peer())
        result = await send.send_one(one_message(request.topic, request.messages[0]),
                                     born_host_from_peer(context.peer()))
        return rmq_pb2.SendMessageResponse(
            status=rmq_pb2.Status(code=result.code, message=result.reason), msg_ids=[result.msg_id],
            queue_ids=[result.queue_id], queue_offsets=[result.queue_offset],
            recall_handles=[result.recall_handle] if result.recall_handle else [])

    @answers_with_status(rmq_pb2.RecallMessageResponse)
    async def RecallMessage(self, request: rmq_pb2.RecallMessageRequest,
                            context: Context) -> rmq_pb2.RecallMessageResponse:
        await self.processors.recall.recall(request.topic, request.recall_handle)
        return rmq_pb2.RecallMessageResponse(status=OK)

    @answers_with_status(rmq_pb2.PullMessageResponse)
    async def PullMessage(self, request: rmq_pb2.PullMessageRequest,
                          context: Context) -> rmq_pb2.PullMessageResponse:
        pull = self.processors.pull
        return await pull.process(request, lease=pull.budget.lease(context))

    @answers_with_status(rmq_pb2.GetTopicOffsetsResponse)
    async def GetTopicOffsets(self, request: rmq_pb2.GetTopicOffsetsRequest,
                              context: Context) -> rmq_pb2.GetTopicOffsetsResponse:
        queues = await self.processors.admin.topic_offsets(request.topic)
        timer = self.processors.send.timer
        pending = 0 if timer is None else timer.pending_of_topic(request.topic)
        return rmq_pb2.GetTopicOffsetsResponse(status=OK, pending_timers=pending, queues=[
            rmq_pb2.QueueOffsets(queue_id=queue.queue_id, min_offset=queue.min_offset,
                                 max_offset=queue.max_offset, last_store_timestamp=queue.last_store_timestamp)
            for queue in queues])

    @answers_with_status(rmq_pb2.SearchOffsetResponse)
    async def SearchOffset(self, request: rmq_pb2.SearchOffsetRequest,
                           context: Context) -> rmq_pb2.SearchOffsetResponse:
        offset = await self.processors.admin.search_offset(request.topic, request.queue_id, request.timestamp)
        return rmq_pb2.SearchOffsetResponse(status=OK, offset=offset)

    @answers_with_status(rmq_pb2.QueryConsumerOffsetsResponse)
    async def QueryConsumerOffsets(self, request: rmq_pb2.QueryConsumerOffsetsRequest,
                                   context: Context) -> rmq_pb2.QueryConsumerOffsetsResponse:
        found = self.processors.consumer_manage.query_offsets(request.consumer_group, request.topic)
        return rmq_pb2.QueryConsumerOffsetsResponse(status=OK, offsets=[
            rmq_pb2.ConsumerOffset(topic=key.topic, queue_id=key.queue_id, offset=offset)
            for key, offset in found.items()])

    @answers_with_status(rmq_pb2.UpdateConsumerOffsetsResponse)
    async def UpdateConsumerOffsets(
            self, request: rmq_pb2.UpdateConsumerOffsetsRequest,
            context: Context) -> rmq_pb2.UpdateConsumerOffsetsResponse:
        offsets = {(entry.topic, entry.queue_id): entry.offset for entry in request.offsets}
        self.processors.consumer_manage.update_offsets(request.consumer_group, offsets,
                                                       increase_only=request.increase_only)
        return rmq_pb2.UpdateConsumerOffsetsResponse(status=OK)

    @answers_with_status(rmq_pb2.RemoveConsumerOffsetsResponse)
    async def RemoveConsumerOffsets(
            self, request: rmq_pb2.RemoveConsumerOffsetsRequest,
            context: Context) -> rmq_pb2.RemoveConsumerOffsetsResponse:
        self.processors.consumer_manage.remove_offsets(
            request.consumer_group, [(entry.topic, entry.queue_id) for entry in request.offsets])
        return rmq_pb2.RemoveConsumerOffsetsResponse(status=OK)

    @answers_with_status(rmq_pb2.HeartbeatResponse)
    async def Heartbeat(self, request: rmq_pb2.HeartbeatRequest,
                        context: Context) -> rmq_pb2.HeartbeatResponse:
        self.processors.client_manage.heartbeat(
            request.client_id, request.consumer_group, request.message_model,
            {s.topic: s.sub_expression for s in request.subscriptions}, rmq_pb2.CLIENT_PROTOCOL_RMQ,
            context.peer() if context is not None else "")
        return rmq_pb2.HeartbeatResponse(status=OK)

    @answers_with_status(rmq_pb2.UnregisterClientResponse)
    async def UnregisterClient(self, request: rmq_pb2.UnregisterClientRequest,
                               context: Context) -> rmq_pb2.UnregisterClientResponse:
        self.processors.client_manage.unregister(request.client_id, request.consumer_group)
        return rmq_pb2.UnregisterClientResponse(status=OK)

    @answers_with_status(rmq_pb2.GetConsumerListResponse)
    async def GetConsumerList(self, request: rmq_pb2.GetConsumerListRequest,
                              context: Context) -> rmq_pb2.GetConsumerListResponse:
        client_ids = self.processors.consumer_manage.consumer_list(request.consumer_group)
        return rmq_pb2.GetConsumerListResponse(status=OK, client_ids=client_ids)

    @answers_with_status(rmq_pb2.LockBatchResponse)
    async def LockBatchMQ(self, request: rmq_pb2.LockBatchRequest,
                          context: Context) -> rmq_pb2.LockBatchResponse:
        locked = self.processors.admin.lock_batch(request.consumer_group, request.client_id,
                                                  to_message_queues(request.queues))
        return rmq_pb2.LockBatchResponse(status=OK, locked_queues=[
            rmq_pb2.MessageQueue(topic=mq.topic, broker_name=mq.broker_name, queue_id=mq.queue_id)
            for mq in locked])

    @answers_with_status(rmq_pb2.UnlockBatchResponse)
    async def UnlockBatchMQ(self, request: rmq_pb2.UnlockBatchRequest,
                            context: Context) -> rmq_pb2.UnlockBatchResponse:
        self.processors.admin.unlock_batch(request.consumer_group, request.client_id,
                                           to_message_queues(request.queues))
        return rmq_pb2.UnlockBatchResponse(status=OK)

    @answers_with_status(rmq_pb2.QueryMessageByKeyResponse)
    async def QueryMessageByKey(self, request: rmq_pb2.QueryMessageByKeyRequest,
                                context: Context) -> rmq_pb2.QueryMessageByKeyResponse:
        result = await self.processors.query.query_by_key(request.topic, request.key, request.max_messages,
                                                          request.begin_timestamp, request.end_timestamp)
        response = rmq_pb2.QueryMessageByKeyResponse(status=OK)
        pack_messages(response.messages, result)
        return response

    @answers_with_status(rmq_pb2.ConsumerSendMsgBackResponse)
    async def ConsumerSendMsgBack(self, request: rmq_pb2.ConsumerSendMsgBackRequest,
                                  context: Context) -> rmq_pb2.ConsumerSendMsgBackResponse:
        return await self.processors.send_back.process(request)

    @answers_with_status(rmq_pb2.ReportRunningInfoResponse)
    async def ReportRunningInfo(self, request: rmq_pb2.ReportRunningInfoRequest,
                                context: Context) -> rmq_pb2.ReportRunningInfoResponse:
        self.processors.consumer_manage.report_running_info(request)
        return rmq_pb2.ReportRunningInfoResponse(status=OK)

    async def WatchConsumerIds(
            self, request: rmq_pb2.WatchConsumerIdsRequest,
            context: Context) -> AsyncIterator[rmq_pb2.ConsumerIdsChanged]:
        try:
            events = self.processors.consumer_manage.watch_consumer_ids(
                request.consumer_group, request.client_id, request.adopts_offset_resets)
        except BrokerError as error:
            yield rmq_pb2.ConsumerIdsChanged(status=error.status())
            return
        async for event in events:
            yield event
