"""AdminService: the broker's rmq.v1 gRPC face for administration (`rmq topic`, `rmq group`,
`rmq message`, `rmq broker status`, the console). It only translates: each request into a call
of AdminBrokerProcessor (or, to browse a queue, PullMessageProcessor) and the answer back."""

from __future__ import annotations

from rmq.broker_server.grpc_aio import Context
from rmq.broker_server.processors.pipeline import BrokerProcessors
from rmq.broker_server.status import OK, answers_with_status
from rmq.topic_config import TopicConfig
from rmq.v1 import rmq_pb2, rmq_pb2_grpc


class AdminService(rmq_pb2_grpc.AdminServiceServicer):
    def __init__(self, processors: BrokerProcessors) -> None:
        self.processors = processors
        self.admin = processors.admin

    @answers_with_status(rmq_pb2.CreateTopicResponse)
    async def CreateTopic(self, request: rmq_pb2.CreateTopicRequest,
                          context: Context) -> rmq_pb2.CreateTopicResponse:
        await self.admin.create_topic(TopicConfig.from_proto(request.config))
        return rmq_pb2.CreateTopicResponse(status=OK)

    @answers_with_status(rmq_pb2.UpdateTopicResponse)
    async def UpdateTopic(self, request: rmq_pb2.UpdateTopicRequest,
                          context: Context) -> rmq_pb2.UpdateTopicResponse:
        await self.admin.update_topic(TopicConfig.from_proto(request.config))
        return rmq_pb2.UpdateTopicResponse(status=OK)

    @answers_with_status(rmq_pb2.DeleteTopicResponse)
    async def DeleteTopic(self, request: rmq_pb2.DeleteTopicRequest,
                          context: Context) -> rmq_pb2.DeleteTopicResponse:
        await self.admin.delete_topic(request.topic)
        return rmq_pb2.DeleteTopicResponse(status=OK)

    @answers_with_status(rmq_pb2.PullMessageResponse)
    async def BrowseMessages(self, request: rmq_pb2.BrowseMessagesRequest,
                             context: Context) -> rmq_pb2.PullMessageResponse:
        """Read a queue whatever the topic's permission (`rmq dlq list`: a DLQ is write-only)."""
        processor = self.processors.pull
        return await processor.get_message(processor.browse_query(request),
                                           lease=processor.budget.lease(context))

    @answers_with_status(rmq_pb2.BrokerStatusResponse)
    async def GetBrokerStatus(self, request: rmq_pb2.BrokerStatusRequest,
                              context: Context) -> rmq_pb2.BrokerStatusResponse:
        return self.admin.broker_status()

    @answers_with_status(rmq_pb2.ViewMessageResponse)
    async def ViewMessage(self, request: rmq_pb2.ViewMessageRequest,
                          context: Context) -> rmq_pb2.ViewMessageResponse:
        record = await self.admin.view_message(request.commit_log_offset)
        response = rmq_pb2.ViewMessageResponse(status=OK)
        response.messages.count = 1
        response.messages.sizes = len(record).to_bytes(4, "little")
        response.messages.records = record
        return response

    @answers_with_status(rmq_pb2.GetConsumerConnectionsResponse)
    async def GetConsumerConnections(self, request: rmq_pb2.GetConsumerConnectionsRequest,
                                     context: Context
                                     ) -> rmq_pb2.GetConsumerConnectionsResponse:
        """The group's live members of every protocol (`rmq group members`, the console)."""
        return rmq_pb2.GetConsumerConnectionsResponse(
            status=OK, connections=self.admin.consumer_connections(request.consumer_group))

    @answers_with_status(rmq_pb2.ListConsumerGroupsResponse)
    async def ListConsumerGroups(self, request: rmq_pb2.ListConsumerGroupsRequest,
                                 context: Context) -> rmq_pb2.ListConsumerGroupsResponse:
        """Every group known here from any source, as far as the caller may see it (SUB on it)."""
        return rmq_pb2.ListConsumerGroupsResponse(status=OK, groups=self.admin.visible_consumer_groups())
