"""`apache.rocketmq.v2.MessagingService` on the broker's port (spec rocketmq-v2-protocol.md; Apache
proxy grpc/v2 activities): the official RocketMQ 5 clients produce to and consume from rmq.
Each RPC translates its request into the broker's processors (processors/pipeline.py: send,
pop, ack, change of invisibility, end of transaction, offsets), the route resolver or the
telemetry sessions, and their answer back; refusals travel as the response's v2 Status."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from grpc.aio import ServicerContext

from rmq import message_format as mf
from rmq.broker_server.grpc_aio import Context
from rmq.broker_server.processors.end_transaction_processor import HALF_TOPIC
from rmq.broker_server.processors.names import TIMER_TOPIC, check_group_name
from rmq.broker_server.processors.pipeline import BrokerProcessors
from rmq.broker_server.processors.pop_message_processor import PopMessageHeader
from rmq.broker_server.processors.send_message_processor import OneMessage, born_host_from_peer
from rmq.broker_server.processors.timer_message_store import TimerMessageStore
from rmq.broker_server.rocketmq_v2 import messages
from rmq.broker_server.rocketmq_v2.offset_rpcs import OffsetRpcs
from rmq.broker_server.rocketmq_v2.route import assignments, message_queues, routed_brokers
from rmq.broker_server.rocketmq_v2.status import OK, V2Error, answers_with_status, as_v2_error
from rmq.broker_server.rocketmq_v2.telemetry import TelemetrySessions
from rmq.broker_server.rocketmq_v2.transactions import resolution_of
from rmq.broker_server.security.rocketmq_v2_auth import CLIENT_ID
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from rmq.rocketmq_v2.properties import PROPERTY_TIMER_DELIVER_MS
from rmq.store import MessageToStore
from rmq.topic_config import TopicConfig

MAX_LONG_POLLING_S = 20.0              # proxy grpcClientConsumerMaxLongPollingTimeoutMillis
DEADLINE_MARGIN_S = 0.5                # answer before the client's own deadline passes
SUPPORTED_TYPES = (v2.NORMAL, v2.FIFO, v2.DELAY, v2.TRANSACTION)   # not LITE, PRIORITY


def _client_id(context: Context) -> str:
    return str(dict(context.invocation_metadata() or ()).get(CLIENT_ID, ""))


def _duration_ms(duration: Duration) -> int:
    return duration.seconds * 1000 + duration.nanos // 1_000_000


def _wait_s(long_polling_s: float, context: Context) -> float:
    """The long polling asked for, within MAX_LONG_POLLING_S and the call's deadline."""
    remaining = context.time_remaining()
    if remaining is not None:
        long_polling_s = min(long_polling_s, remaining - DEADLINE_MARGIN_S)
    return min(long_polling_s, MAX_LONG_POLLING_S)


def _pop_header(request: pb.ReceiveMessageRequest, context: Context) -> PopMessageHeader:
    """The pop a ReceiveMessage asks for (an auto-renewed one is kept invisible while the calling
    client stays connected)."""
    invisible_ms = None
    if request.HasField("invisible_duration"):
        invisible_ms = _duration_ms(request.invisible_duration)
    long_polling_s = 0.0
    if request.HasField("long_polling_timeout"):
        long_polling_s = _duration_ms(request.long_polling_timeout) / 1000
    expression = request.filter_expression
    return PopMessageHeader(
        request.group.name, request.message_queue.topic.name, request.message_queue.id, expression.expression,
        expression.type == v2.SQL, request.batch_size, invisible_ms, _wait_s(long_polling_s, context),
        request.attempt_id, _client_id(context) if request.auto_renew else "")


class RocketMQv2MessagingService:
    def __init__(self, processors: BrokerProcessors,
                 sessions: TelemetrySessions, timer: TimerMessageStore, offset_rpcs: OffsetRpcs,
                 max_body_size: int) -> None:
        self.processors = processors
        self.sender = processors.send
        self.transactions = processors.end_transaction
        self.pop = processors.pop
        self.sessions = sessions
        self.timer = timer
        self.offset_rpcs = offset_rpcs
        self.max_body_size = max_body_size
        self._round_robin = itertools.count()

    # -- route and session ---------------------------------------------------------------
    @answers_with_status(pb.QueryRouteResponse)
    async def QueryRoute(
            self, request: pb.QueryRouteRequest,
            context: ServicerContext[pb.QueryRouteRequest,
                                     pb.QueryRouteResponse],
    ) -> pb.QueryRouteResponse:
        brokers = await routed_brokers(self.processors.route, request.topic.name, request.endpoints)
        return pb.QueryRouteResponse(status=OK, message_queues=message_queues(request.topic, brokers))

    @answers_with_status(pb.QueryAssignmentResponse)
    async def QueryAssignment(
            self, request: pb.QueryAssignmentRequest,
            context: ServicerContext[pb.QueryAssignmentRequest,
                                     pb.QueryAssignmentResponse],
    ) -> pb.QueryAssignmentResponse:
        check_group_name(request.group.name)
        brokers = await routed_brokers(self.processors.route, request.topic.name, request.endpoints)
        return pb.QueryAssignmentResponse(
            status=OK,
            assignments=assignments(request.topic, brokers, self.pop.policy.fifo(request.group.name)))

    @answers_with_status(pb.HeartbeatResponse)
    async def Heartbeat(
            self, request: pb.HeartbeatRequest,
            context: ServicerContext[pb.HeartbeatRequest,
                                     pb.HeartbeatResponse],
    ) -> pb.HeartbeatResponse:
        self.sessions.heartbeat(_client_id(context))   # -> ClientManageProcessor
        return pb.HeartbeatResponse(status=OK)

    @answers_with_status(pb.NotifyClientTerminationResponse)
    async def NotifyClientTermination(
            self, request: pb.NotifyClientTerminationRequest,
            context: ServicerContext[pb.NotifyClientTerminationRequest,
                                     pb.NotifyClientTerminationResponse],
    ) -> pb.NotifyClientTerminationResponse:
        await self.pop.release(_client_id(context))
        return pb.NotifyClientTerminationResponse(status=OK)

    async def Telemetry(
            self, commands: AsyncIterator[pb.TelemetryCommand],
            context: ServicerContext[pb.TelemetryCommand,
                                     pb.TelemetryCommand],
    ) -> AsyncIterator[pb.TelemetryCommand]:
        client_id = _client_id(context)
        if not client_id:
            yield pb.TelemetryCommand(status=v2.Status(code=v2.CLIENT_ID_REQUIRED,
                                                       message=f"header {CLIENT_ID} is missing"))
            return
        async for command in self.sessions.serve(client_id, context.peer(), commands):
            yield command

    # -- sending -------------------------------------------------------------------------
    @answers_with_status(pb.SendMessageResponse)
    async def SendMessage(
            self, request: pb.SendMessageRequest,
            context: ServicerContext[pb.SendMessageRequest,
                                     pb.SendMessageResponse],
    ) -> pb.SendMessageResponse:
        if len(request.messages) == 1:
            message = request.messages[0]
            kind = messages.message_type(message)
            if kind != v2.TRANSACTION:
                return await self._send_one(message, kind, context)
        if not request.messages:
            raise V2Error(v2.BAD_REQUEST, "the request holds no messages")
        topics = {message.topic.name for message in request.messages}
        if len(topics) != 1:
            raise V2Error(v2.BAD_REQUEST, "the messages of one request must share one topic")
        config = self.sender.writeable_topic(topics.pop())
        born_host = born_host_from_peer(context.peer())
        to_store = [self._to_store(message, config, born_host) for message in request.messages]
        if any(stored.topic == HALF_TOPIC for stored in to_store):
            self.transactions.check_room()
        results = await self.sender.put_records(config.topic_name, to_store)
        entries = []
        for message, stored, result in zip(request.messages, to_store, results, strict=True):
            entry = pb.SendResultEntry(status=OK, message_id=message.system_properties.message_id,
                                       offset=result.queue_offset)
            if stored.topic == TIMER_TOPIC:
                entry.recall_handle = self.timer.recall_handle(stored.properties, result.queue_offset)
                entry.offset = -1   # its real offset is assigned at delivery
            elif stored.topic == HALF_TOPIC:
                entry.transaction_id = await self.transactions.opened(
                    config.topic_name, entry.message_id, result.queue_offset, stored.properties)
                entry.offset = -1
            entries.append(entry)
        return pb.SendMessageResponse(status=OK, entries=entries)

    @answers_with_status(pb.EndTransactionResponse)
    async def EndTransaction(
            self, request: pb.EndTransactionRequest,
            context: ServicerContext[pb.EndTransactionRequest,
                                     pb.EndTransactionResponse],
    ) -> pb.EndTransactionResponse:
        await self.transactions.end(request.transaction_id, request.message_id,
                                    resolution_of(request.resolution), request.topic.name)
        return pb.EndTransactionResponse(status=OK)

    @answers_with_status(pb.RecallMessageResponse)
    async def RecallMessage(
            self, request: pb.RecallMessageRequest,
            context: ServicerContext[pb.RecallMessageRequest,
                                     pb.RecallMessageResponse],
    ) -> pb.RecallMessageResponse:
        message_id = await self.processors.recall.recall(request.topic.name, request.recall_handle)
        return pb.RecallMessageResponse(status=OK, message_id=message_id)

    async def _send_one(self, message: v2.Message, kind: int, context: Context) -> pb.SendMessageResponse:
        """One message that opens no transaction, on the processor's single-message path
        (SendMessageProcessor.send_one, as rmq.v1's and 4.x remoting's single sends): the same
        checks in the same order as a batch's (topic, then the message), its record built once."""
        config = self.sender.writeable_topic(message.topic.name)
        self._check_type(message, kind)
        tag, keys, properties = messages.sent_properties(message, kind)
        if kind == v2.DELAY:
            properties[PROPERTY_TIMER_DELIVER_MS] = str(self._delivery_time(message))
        born = messages.timestamp_ms(message.system_properties.born_timestamp)
        one = OneMessage(config.topic_name, message.body, tag, keys, properties,
                         self._fifo_queue_id(message, config) if kind == v2.FIFO else -1, born_timestamp=born)
        result = await self.sender.send_one(one, born_host_from_peer(context.peer()), config)
        return pb.SendMessageResponse(status=OK, entries=[pb.SendResultEntry(
            status=OK, message_id=properties[mf.PROPERTY_UNIQ_KEY], offset=result.queue_offset,
            recall_handle=result.recall_handle)])

    def _check_type(self, message: v2.Message, kind: int) -> None:
        """Refuse a message whose body or type (`kind`, its `message_type`) the broker does not take."""
        body_size = len(message.body)
        if not body_size:
            raise V2Error(v2.MESSAGE_BODY_EMPTY, "message body is empty")
        if body_size > self.max_body_size:
            raise V2Error(v2.MESSAGE_BODY_TOO_LARGE, f"message body takes {body_size} bytes, "
                                                     f"the maximum is {self.max_body_size}")
        if kind not in SUPPORTED_TYPES:
            raise V2Error(v2.UNSUPPORTED, f"message type {v2.MessageType.Name(kind)} is not supported")

    def _to_store(self, message: v2.Message, config: TopicConfig, born_host: bytes) -> MessageToStore:
        """The record to store: in its queue, or parked in the timer (a DELAY message, or any
        carrying a timer property, due later: TimerMessageStore.park) or as a transaction's half
        message, with the real topic and queue in properties."""
        kind = messages.message_type(message)
        self._check_type(message, kind)
        properties = messages.record_properties(message)
        topic, queue_id = config.topic_name, self._queue_id(message, config)
        if kind == v2.DELAY:
            properties[PROPERTY_TIMER_DELIVER_MS] = str(self._delivery_time(message))
        if kind == v2.TRANSACTION:
            properties[mf.PROPERTY_REAL_TOPIC] = topic
            properties[mf.PROPERTY_REAL_QUEUE_ID] = str(queue_id)
            topic, queue_id = HALF_TOPIC, 0
        else:
            topic, queue_id = self.timer.park(properties, topic, queue_id)
        return messages.to_store(message, topic, queue_id, properties, born_host)

    def _delivery_time(self, message: v2.Message) -> int:
        system = message.system_properties
        if not system.HasField("delivery_timestamp"):
            raise V2Error(v2.ILLEGAL_DELIVERY_TIME, "a DELAY message needs a delivery timestamp")
        return max(messages.delivery_time_ms(system.delivery_timestamp), 0)

    def _queue_id(self, message: v2.Message, config: TopicConfig) -> int:
        """FIFO: the message group's queue (hash), so a group keeps its order; else round robin."""
        if messages.message_type(message) == v2.FIFO:
            return self._fifo_queue_id(message, config)
        return next(self._round_robin) % config.write_queue_nums

    @staticmethod
    def _fifo_queue_id(message: v2.Message, config: TopicConfig) -> int:
        group = message.system_properties.message_group
        return (mf.tags_hash_code(group) & 0x7FFFFFFF) % config.write_queue_nums

    # -- pop consumption: PopMessageProcessor, AckMessageProcessor, ChangeInvisibleTimeProcessor --
    async def ReceiveMessage(
            self, request: pb.ReceiveMessageRequest,
            context: ServicerContext[pb.ReceiveMessageRequest,
                                     pb.ReceiveMessageResponse],
    ) -> AsyncIterator[pb.ReceiveMessageResponse]:
        """One status, one response per message, a final delivery timestamp, then the stream
        ends (§4: the client reads the whole stream). The messages count against the pull budget
        (max_inflight_pull_bytes) until the stream ends."""
        try:
            lease = self.processors.pull.budget.lease(context)
            popped = await self.pop.pop(_pop_header(request, context), lease)
        except Exception as error:
            yield pb.ReceiveMessageResponse(status=as_v2_error(error).status())
            return
        if not popped:
            yield pb.ReceiveMessageResponse(status=v2.Status(code=v2.MESSAGE_NOT_FOUND,
                                                             message="no new message"))
            return
        yield pb.ReceiveMessageResponse(status=OK)
        for item in popped:
            yield pb.ReceiveMessageResponse(message=messages.to_v2(
                item.message, request.message_queue.topic.name, item.receipt_handle, item.attempts,
                item.invisible_ms))
        stamp = Timestamp()
        stamp.GetCurrentTime()
        yield pb.ReceiveMessageResponse(delivery_timestamp=stamp)

    @answers_with_status(pb.AckMessageResponse)
    async def AckMessage(self, request: pb.AckMessageRequest,
            context: ServicerContext[pb.AckMessageRequest,
                                     pb.AckMessageResponse],
    ) -> pb.AckMessageResponse:
        refusals = await self.processors.ack.ack(request.group.name, request.topic.name,
                                                 [entry.receipt_handle for entry in request.entries])
        results = [pb.AckMessageResultEntry(message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                                            status=OK if refused is None else as_v2_error(refused).status())
                   for entry, refused in zip(request.entries, refusals, strict=True)]
        codes = {result.status.code for result in results}
        top = OK if codes == {v2.OK} else v2.Status(
            code=codes.pop() if len(codes) == 1 else v2.MULTIPLE_RESULTS, message="see the entries")
        return pb.AckMessageResponse(status=top, entries=results)

    @answers_with_status(pb.ChangeInvisibleDurationResponse)
    async def ChangeInvisibleDuration(
            self, request: pb.ChangeInvisibleDurationRequest,
            context: ServicerContext[pb.ChangeInvisibleDurationRequest,
                                     pb.ChangeInvisibleDurationResponse],
    ) -> pb.ChangeInvisibleDurationResponse:
        receipt_handle = await self.processors.change_invisible.change(
            request.group.name, request.topic.name, request.receipt_handle,
            _duration_ms(request.invisible_duration))
        return pb.ChangeInvisibleDurationResponse(status=OK, receipt_handle=receipt_handle)

    @answers_with_status(pb.ForwardMessageToDeadLetterQueueResponse)
    async def ForwardMessageToDeadLetterQueue(
            self, request: pb.ForwardMessageToDeadLetterQueueRequest,
            context: ServicerContext[pb.ForwardMessageToDeadLetterQueueRequest,
                                     pb.ForwardMessageToDeadLetterQueueResponse],
    ) -> pb.ForwardMessageToDeadLetterQueueResponse:
        await self.processors.ack.forward_to_dlq(request.group.name, request.topic.name,
                                                 request.receipt_handle, request.max_delivery_attempts)
        return pb.ForwardMessageToDeadLetterQueueResponse(status=OK)

    # -- offset-based consumption (§5) -----------------------------------------------------
    async def PullMessage(
            self, request: pb.PullMessageRequest,
            context: ServicerContext[pb.PullMessageRequest,
                                     pb.PullMessageResponse],
    ) -> AsyncIterator[pb.PullMessageResponse]:
        wait_ms = int(max(_wait_s(_duration_ms(request.long_polling_timeout) / 1000, context), 0) * 1000)
        async for response in self.offset_rpcs.pull(request, wait_ms, context):
            yield response

    @answers_with_status(pb.UpdateOffsetResponse)
    async def UpdateOffset(
            self, request: pb.UpdateOffsetRequest,
            context: ServicerContext[pb.UpdateOffsetRequest,
                                     pb.UpdateOffsetResponse],
    ) -> pb.UpdateOffsetResponse:
        await self.offset_rpcs.update_offset(request)
        return pb.UpdateOffsetResponse(status=OK)

    @answers_with_status(pb.GetOffsetResponse)
    async def GetOffset(
            self, request: pb.GetOffsetRequest,
            context: ServicerContext[pb.GetOffsetRequest,
                                     pb.GetOffsetResponse],
    ) -> pb.GetOffsetResponse:
        return pb.GetOffsetResponse(status=OK, offset=await self.offset_rpcs.get_offset(request))

    @answers_with_status(pb.QueryOffsetResponse)
    async def QueryOffset(
            self, request: pb.QueryOffsetRequest,
            context: ServicerContext[pb.QueryOffsetRequest,
                                     pb.QueryOffsetResponse],
    ) -> pb.QueryOffsetResponse:
        return pb.QueryOffsetResponse(status=OK, offset=await self.offset_rpcs.query_offset(request))

    def start(self) -> None:
        self.pop.start(self.sessions.connected)

    async def shutdown(self) -> None:
        """Close telemetry streams and answer held receives (so the server need not wait for
        them)."""
        self.sessions.end_all()
        self.pop.shutdown()
