"""AdminService: the broker's rmq.v1 gRPC face for administration (`rmq topic`, `rmq group`,
`rmq message`, `rmq broker status`, the console). It only translates: each request into a call
of AdminBrokerProcessor (or, to browse a queue, PullMessageProcessor) and the answer back."""

from __future__ import annotations

from collections.abc import Mapping

from rmq.broker_server.grpc_aio import Context
from rmq.broker_server.offsets.subscription_group_manager import SubscriptionGroupConfig
from rmq.broker_server.processors.pipeline import BrokerProcessors
from rmq.broker_server.security.acl import Account, Perm
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

    @answers_with_status(rmq_pb2.ResetConsumerOffsetsResponse)
    async def ResetConsumerOffsets(self, request: rmq_pb2.ResetConsumerOffsetsRequest,
                                   context: Context) -> rmq_pb2.ResetConsumerOffsetsResponse:
        """An admin's offset reset, adopted by the group's live consumers (`rmq group reset-offset`)."""
        outcome = self.processors.consumer_manage.reset_offsets(
            request.consumer_group,
            {(entry.topic, entry.queue_id): entry.offset for entry in request.offsets}, request.force)
        return rmq_pb2.ResetConsumerOffsetsResponse(status=OK, notified_client_ids=outcome.notified,
                                                    untold_client_ids=outcome.untold)

    @answers_with_status(rmq_pb2.GetConsumerRunningInfoResponse)
    async def GetConsumerRunningInfo(self, request: rmq_pb2.GetConsumerRunningInfoRequest,
                                     context: Context) -> rmq_pb2.GetConsumerRunningInfoResponse:
        """A live consumer's process queues and subscriptions (`rmq group status`, consumerStatus)."""
        info = await self.processors.consumer_manage.running_info(request.consumer_group, request.client_id)
        return rmq_pb2.GetConsumerRunningInfoResponse(status=OK, info=info)

    @answers_with_status(rmq_pb2.UpdateSubscriptionGroupResponse)
    async def UpdateSubscriptionGroup(self, request: rmq_pb2.UpdateSubscriptionGroupRequest,
                                      context: Context) -> rmq_pb2.UpdateSubscriptionGroupResponse:
        """An admin's per-group settings (`rmq group set`), stored before the answer."""
        await self.processors.subscription_group.update(SubscriptionGroupConfig.from_proto(request.config))
        return rmq_pb2.UpdateSubscriptionGroupResponse(status=OK)

    @answers_with_status(rmq_pb2.DeleteSubscriptionGroupResponse)
    async def DeleteSubscriptionGroup(self, request: rmq_pb2.DeleteSubscriptionGroupRequest,
                                      context: Context) -> rmq_pb2.DeleteSubscriptionGroupResponse:
        """An admin's `rmq group delete`: the group's stored settings go, durably, before the answer."""
        deleted = await self.processors.subscription_group.delete(request.consumer_group)
        return rmq_pb2.DeleteSubscriptionGroupResponse(status=OK, deleted=deleted)

    @answers_with_status(rmq_pb2.GetSubscriptionGroupResponse)
    async def GetSubscriptionGroup(self, request: rmq_pb2.GetSubscriptionGroupRequest,
                                   context: Context) -> rmq_pb2.GetSubscriptionGroupResponse:
        config, stored = self.processors.subscription_group.get(request.consumer_group)
        return rmq_pb2.GetSubscriptionGroupResponse(status=OK, stored=stored, config=config.to_proto())

    @answers_with_status(rmq_pb2.GetProducerConnectionsResponse)
    async def GetProducerConnections(self, request: rmq_pb2.GetProducerConnectionsRequest,
                                     context: Context) -> rmq_pb2.GetProducerConnectionsResponse:
        """The producer group's live producers (`rmq group producers`, producerConnection)."""
        return rmq_pb2.GetProducerConnectionsResponse(
            status=OK, connections=self.processors.client_manage.producer_connections(request.producer_group))

    @answers_with_status(rmq_pb2.ListConsumerGroupsResponse)
    async def ListConsumerGroups(self, request: rmq_pb2.ListConsumerGroupsRequest,
                                 context: Context) -> rmq_pb2.ListConsumerGroupsResponse:
        """Every group known here from any source, as far as the caller may see it (SUB on it)."""
        return rmq_pb2.ListConsumerGroupsResponse(status=OK, groups=self.admin.visible_consumer_groups())

    @answers_with_status(rmq_pb2.GetGroupStatsResponse)
    async def GetGroupStats(self, request: rmq_pb2.GetGroupStatsRequest,
                            context: Context) -> rmq_pb2.GetGroupStatsResponse:
        """What the group's pulls took from here per topic and when last (the console's consume TPS
        and last consume time)."""
        return rmq_pb2.GetGroupStatsResponse(status=OK, topics=[
            rmq_pb2.GroupTopicStats(topic=topic, get_messages=counters.get_messages,
                                    last_get_ms=counters.last_get_ms)
            for topic, counters in sorted(self.admin.group_stats(request.consumer_group).items())])

    @answers_with_status(rmq_pb2.DescribeAclResponse)
    async def DescribeAcl(self, request: rmq_pb2.DescribeAclRequest,
                          context: Context) -> rmq_pb2.DescribeAclResponse:
        """The ACL in force, for admins (the rule table lets no one else call): accounts and their
        permissions, never a secret key."""
        acl = self.admin.acl()
        if acl is None:
            return rmq_pb2.DescribeAclResponse(status=OK, enabled=False)
        return rmq_pb2.DescribeAclResponse(
            status=OK, enabled=True, accounts=[_account(acl.accounts[key]) for key in sorted(acl.accounts)],
            global_white_remote_addresses=[p.text for p in acl.global_white_remote_addresses])


def _account(account: Account) -> rmq_pb2.AclAccount:
    """An account as DescribeAcl shows it: everything but its secret key."""
    return rmq_pb2.AclAccount(
        access_key=account.access_key, admin=account.admin,
        default_topic_perm=account.default_topic_perm.text,
        default_group_perm=account.default_group_perm.text,
        topic_perms=_perms(account.topic_perms), group_perms=_perms(account.group_perms),
        white_remote_address=account.white_remote_address.text if account.white_remote_address else "",
        broker_name=account.broker_name or "")


def _perms(perms: Mapping[str, Perm]) -> list[rmq_pb2.AclResourcePerm]:
    return [rmq_pb2.AclResourcePerm(name=name, perm=perms[name].text) for name in sorted(perms)]
