"""AdminService: create, grow (update) and delete this broker's topics. A change is
persisted, announced to the name servers at once, and a deleted topic's data, consumer
offsets and held pulls go with it. On a SYNC_MASTER a change is answered once a slave has it
(`topics_replicated`; FLUSH_SLAVE_TIMEOUT when none confirmed it in time)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from rmq.broker_server.errors import BrokerError
from rmq.broker_server.grpc_aio import Context
from rmq.broker_server.long_polling.pull_request_hold_service import PullRequestHoldService
from rmq.broker_server.metrics.broker_stats import BrokerStatsManager
from rmq.broker_server.offsets.consumer_offset_manager import ConsumerOffsetManager
from rmq.broker_server.processors.names import check_group_name
from rmq.broker_server.processors.pull_message_processor import PullMessageProcessor
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.topic_config_manager import TopicConfigManager
from rmq.broker_server.security import caller
from rmq.broker_server.security.acl import Account, Acl, Need, Perm, ResourceKind
from rmq.broker_server.status import OK, answers_with_status
from rmq.store import MessageStore
from rmq.topic_config import TopicConfig
from rmq.v1 import rmq_pb2, rmq_pb2_grpc


class AdminService(rmq_pb2_grpc.AdminServiceServicer):
    def __init__(
        self,
        store: MessageStore,
        executor: StoreExecutor,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        hold_service: PullRequestHoldService,
        on_topics_changed: Callable[[], None],
        pull_processor: PullMessageProcessor,
        broker_status: Callable[[], rmq_pb2.BrokerStatusResponse] | None = None,
        topics_replicated: Callable[[], Awaitable[None]] | None = None,
        consumer_connections: Callable[[str], list[rmq_pb2.ConsumerConnection]] = lambda group: [],
        consumer_groups: Callable[[], set[str]] = set,
        stats: BrokerStatsManager | None = None,
        acl: Callable[[], Acl | None] = lambda: None,
    ) -> None:
        self.store = store
        self.executor = executor
        self.topics = topics
        self.offsets = offsets
        self.hold_service = hold_service
        self.on_topics_changed = on_topics_changed
        self.pull_processor = pull_processor
        self.broker_status = broker_status
        self.consumer_connections = consumer_connections
        self.consumer_groups = consumer_groups
        self.topics_replicated = topics_replicated
        self.stats = stats or BrokerStatsManager()
        self.acl = acl

    async def _topics_changed(self) -> None:
        self.on_topics_changed()
        if self.topics_replicated is not None:
            await self.topics_replicated()

    @answers_with_status(rmq_pb2.CreateTopicResponse)
    async def CreateTopic(self, request: rmq_pb2.CreateTopicRequest,
                          context: Context) -> rmq_pb2.CreateTopicResponse:
        await self.executor.run(self.topics.create, TopicConfig.from_proto(request.config))
        await self._topics_changed()
        return rmq_pb2.CreateTopicResponse(status=OK)

    @answers_with_status(rmq_pb2.UpdateTopicResponse)
    async def UpdateTopic(self, request: rmq_pb2.UpdateTopicRequest,
                          context: Context) -> rmq_pb2.UpdateTopicResponse:
        await self.executor.run(self.topics.update, TopicConfig.from_proto(request.config))
        await self._topics_changed()
        return rmq_pb2.UpdateTopicResponse(status=OK)

    @answers_with_status(rmq_pb2.DeleteTopicResponse)
    async def DeleteTopic(self, request: rmq_pb2.DeleteTopicRequest,
                          context: Context) -> rmq_pb2.DeleteTopicResponse:
        await self.executor.run(self.topics.delete, request.topic)
        await self.executor.run(self.store.delete_topic, request.topic)
        self.offsets.remove_topic(request.topic)
        self.hold_service.wake_topic(request.topic)
        await self._topics_changed()
        return rmq_pb2.DeleteTopicResponse(status=OK)

    @answers_with_status(rmq_pb2.PullMessageResponse)
    async def BrowseMessages(self, request: rmq_pb2.BrowseMessagesRequest,
                             context: Context) -> rmq_pb2.PullMessageResponse:
        """Read a queue whatever the topic's permission (`rmq dlq list`: a DLQ is write-only)."""
        processor = self.pull_processor
        return await processor.get_message(processor.browse_query(request),
                                           lease=processor.budget.lease(context))

    @answers_with_status(rmq_pb2.BrokerStatusResponse)
    async def GetBrokerStatus(self, request: rmq_pb2.BrokerStatusRequest,
                              context: Context) -> rmq_pb2.BrokerStatusResponse:
        """Role, CommitLog offsets and replication state of this broker (`rmq broker status`)."""
        if self.broker_status is None:
            return rmq_pb2.BrokerStatusResponse(status=OK)
        return self.broker_status()

    @answers_with_status(rmq_pb2.ViewMessageResponse)
    async def ViewMessage(self, request: rmq_pb2.ViewMessageRequest,
                          context: Context) -> rmq_pb2.ViewMessageResponse:
        """The record stored at a CommitLog offset (`rmq message query --msg-id`)."""
        record = await self.executor.run(self.store.look_message_by_offset, request.commit_log_offset)
        if record is None:
            raise BrokerError(rmq_pb2.QUERY_NOT_FOUND,
                               f"no message is stored at CommitLog offset {request.commit_log_offset}")
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
        check_group_name(request.consumer_group)
        return rmq_pb2.GetConsumerConnectionsResponse(
            status=OK, connections=self.consumer_connections(request.consumer_group))

    @answers_with_status(rmq_pb2.ListConsumerGroupsResponse)
    async def ListConsumerGroups(self, request: rmq_pb2.ListConsumerGroupsRequest,
                                 context: Context) -> rmq_pb2.ListConsumerGroupsResponse:
        """Every group known here from any source, as far as the caller may see it (SUB on it)."""
        visible = [group for group in self.consumer_groups()
                   if caller.may(ResourceKind.GROUP, group, Need.SUB)]
        return rmq_pb2.ListConsumerGroupsResponse(status=OK, groups=sorted(visible))

    @answers_with_status(rmq_pb2.GetGroupStatsResponse)
    async def GetGroupStats(self, request: rmq_pb2.GetGroupStatsRequest,
                            context: Context) -> rmq_pb2.GetGroupStatsResponse:
        """What the group's pulls took from here per topic and when last (the console's consume TPS
        and last consume time)."""
        check_group_name(request.consumer_group)
        return rmq_pb2.GetGroupStatsResponse(status=OK, topics=[
            rmq_pb2.GroupTopicStats(topic=topic, get_messages=counters.get_messages,
                                    last_get_ms=counters.last_get_ms)
            for topic, counters in sorted(self.stats.of_group(request.consumer_group).items())])

    @answers_with_status(rmq_pb2.DescribeAclResponse)
    async def DescribeAcl(self, request: rmq_pb2.DescribeAclRequest,
                          context: Context) -> rmq_pb2.DescribeAclResponse:
        """The ACL in force, for admins (the rule table lets no one else call): accounts and their
        permissions, never a secret key."""
        acl = self.acl()
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
