"""The offset-based v2 RPCs (rocketmq-apis PR #67; spec rocketmq-v2-protocol.md §5): PullMessage,
UpdateOffset, GetOffset and QueryOffset, on the same consume queues, long polling and consumer
offsets as rmq.v1 (a v2 PullMessage runs through rmq's PullMessageProcessor, so a group's
offsets are shared between the two protocols and `rmq group progress` shows them)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.processors.names import check_group_name
from rmq.broker_server.processors.pipeline import BrokerProcessors
from rmq.broker_server.processors.pull_response_budget import CallContext, PullBytesLease
from rmq.broker_server.rocketmq_v2 import messages
from rmq.broker_server.rocketmq_v2.status import V2Error, as_v2_error
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from rmq.stored_message import decode_records
from rmq.v1 import rmq_pb2

MAX_PULL_BATCH = 1024
_PULL_STATUS = {
    rmq_pb2.FOUND: v2.Status(code=v2.OK, message="OK"),
    rmq_pb2.NO_NEW_MSG: v2.Status(code=v2.MESSAGE_NOT_FOUND, message="no new message"),
    rmq_pb2.NO_MATCHED_MSG: v2.Status(code=v2.MESSAGE_NOT_FOUND, message="no matched message"),
    rmq_pb2.OFFSET_ILLEGAL: v2.Status(code=v2.ILLEGAL_OFFSET, message="offset is out of the queue's range"),
}


class OffsetRpcs:
    """Translates the v2 offset RPCs into PullMessageProcessor, ConsumerManageProcessor and
    AdminBrokerProcessor calls."""

    def __init__(self, processors: BrokerProcessors) -> None:
        self.pull_processor = processors.pull
        self.consumer_manage = processors.consumer_manage
        self.admin = processors.admin

    async def pull(self, request: pb.PullMessageRequest, wait_ms: int, context: CallContext
                   ) -> AsyncIterator[pb.PullMessageResponse]:
        """A status, the messages, always the next offset, then the stream ends. The messages
        count against the pull budget until the stream ends (`context`: the call's)."""
        try:
            response, records = await self._pull(request, wait_ms, self.pull_processor.budget.lease(context))
        except Exception as error:
            yield pb.PullMessageResponse(status=as_v2_error(error).status())
            yield pb.PullMessageResponse(next_offset=request.offset)
            return
        yield pb.PullMessageResponse(status=_PULL_STATUS[response.pull_status])
        for record in records:
            yield pb.PullMessageResponse(message=messages.to_v2(record, request.message_queue.topic.name))
        yield pb.PullMessageResponse(next_offset=response.next_begin_offset)

    async def _pull(self, request: pb.PullMessageRequest, wait_ms: int, lease: PullBytesLease
                    ) -> tuple[Any, list[Any]]:
        check_group_name(request.group.name)
        self.admin.min_offset(request.message_queue.topic.name, request.message_queue.id)   # the queue exists
        expression = request.filter_expression
        pull = rmq_pb2.PullMessageRequest(
            consumer_group=request.group.name,
            topic=request.message_queue.topic.name,
            queue_id=request.message_queue.id,
            queue_offset=request.offset,
            max_messages=min(max(request.batch_size, 1), MAX_PULL_BATCH),
            sys_flag=rmq_pb2.FLAG_SUSPEND if wait_ms > 0 else 0,
            suspend_timeout_ms=wait_ms,
            sub_expression=expression.expression or "*",
            expression_type=rmq_pb2.SQL92 if expression.type == v2.SQL else rmq_pb2.TAG,
        )
        response = await self.pull_processor.process(pull, lease=lease)
        if response.status.code != rmq_pb2.OK:
            raise BrokerError(response.status.code, response.status.message)
        packed = response.messages
        records = decode_records(packed.records, _sizes(packed)) if packed.count else []
        return response, records

    async def update_offset(self, request: pb.UpdateOffsetRequest) -> None:
        if request.offset < 0:
            raise V2Error(v2.ILLEGAL_OFFSET, f"offset must not be negative, not {request.offset}")
        queue = request.message_queue
        offsets = {(queue.topic.name, queue.id): request.offset}
        self.consumer_manage.update_offsets(request.group.name, offsets)

    async def get_offset(self, request: pb.GetOffsetRequest) -> int:
        queue = request.message_queue
        self.admin.min_offset(queue.topic.name, queue.id)   # the queue exists
        offset = self.consumer_manage.query_offset(request.group.name, queue.topic.name, queue.id)
        if offset is None:
            raise V2Error(v2.OFFSET_NOT_FOUND, f"group {request.group.name!r} has no offset for this queue")
        return offset

    async def query_offset(self, request: pb.QueryOffsetRequest) -> int:
        topic, queue_id = request.message_queue.topic.name, request.message_queue.id
        policy = request.query_offset_policy
        if policy == v2.BEGINNING:
            return self.admin.min_offset(topic, queue_id)
        if policy == v2.END:
            return self.admin.max_offset(topic, queue_id)
        if not request.HasField("timestamp"):
            raise V2Error(v2.BAD_REQUEST, "query_offset_policy TIMESTAMP needs a timestamp")
        return await self.admin.search_offset(topic, queue_id, messages.timestamp_ms(request.timestamp))


def _sizes(packed: rmq_pb2.PackedMessages) -> list[int]:
    """PackedMessages.sizes: little-endian int32 per record (rmq.proto)."""
    data = packed.sizes
    return [int.from_bytes(data[i:i + 4], "little", signed=True) for i in range(0, len(data), 4)]

