"""RmqClient: one client for rmq brokers and name servers (ARCHITECTURE.md §3), used by the SDK,
the Spark source and sink, the `rmq` CLI and the benchmarks. It imports grpc and `rmq` only,
never pyspark, so executors and the broker side stay light.

RocketMQ splits its client in three, and so does this one: the client API (client_api.ClientAPI,
MQClientAPIImpl: sends, pulls, offsets, membership, locks), the route cache and broker choice
(route_cache.RouteCache, MQClientInstance's route table) it consults, and the admin calls below
(MQAdminImpl: topics, browsing, lookups by key or offset, consumer connections). The names other
modules take from here (records, statuses, errors) are re-exported from where they are defined.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools

from google.protobuf.message import Message

from rmq.connector.client_api import MAX_SEND_REQUEST_BYTES as MAX_SEND_REQUEST_BYTES
from rmq.connector.client_api import ClientAPI
from rmq.connector.client_api import OutgoingMessage as OutgoingMessage
from rmq.connector.client_api import QueueOffsets as QueueOffsets
from rmq.connector.client_api import SendResult as SendResult
from rmq.connector.client_core import ResponseT, Rpc, by_broker, call_each
from rmq.connector.client_core import unless_unreachable as unless_unreachable
from rmq.connector.errors import ConfigError
from rmq.connector.errors import RmqError as RmqError
from rmq.connector.errors import RmqUnavailable as RmqUnavailable
from rmq.connector.pull_result import PullResult as PullResult
from rmq.connector.pull_result import pull_result as pull_result
from rmq.connector.route_cache import BrokerMember as BrokerMember
from rmq.connector.route_cache import TopicRoute as TopicRoute
from rmq.connector.route_cache import choose_member as choose_member
from rmq.connector.route_cache import send_which_queue_start as send_which_queue_start
from rmq.message_queue import MessageQueue as MessageQueue
from rmq.mix_all import MASTER_ID as MASTER_ID
from rmq.statuses import GetMessageStatus as GetMessageStatus
from rmq.statuses import PullStatus as PullStatus
from rmq.topic_config import PERM_READ as PERM_READ
from rmq.topic_config import PERM_WRITE as PERM_WRITE
from rmq.topic_config import QueueData as QueueData
from rmq.topic_config import TopicConfig
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

_DESCRIBE_CONTROLLER = Rpc("DescribeController",
                           lambda c: rmq_pb2_grpc.ControllerServiceStub(c.channel).DescribeController,
                           rmq_pb2.DescribeControllerResponse)
_GET_BROKER_STATUS = Rpc("GetBrokerStatus", lambda c: c.admin.GetBrokerStatus, rmq_pb2.BrokerStatusResponse)
_BROWSE_MESSAGES = Rpc("BrowseMessages", lambda c: c.admin.BrowseMessages, rmq_pb2.PullMessageResponse)
_CREATE_TOPIC = Rpc("CreateTopic", lambda c: c.admin.CreateTopic, rmq_pb2.CreateTopicResponse)
_DELETE_TOPIC = Rpc("DeleteTopic", lambda c: c.admin.DeleteTopic, rmq_pb2.DeleteTopicResponse)
_LIST_TOPICS = Rpc("ListTopics", lambda c: c.route.ListTopics, rmq_pb2.ListTopicsResponse)
_UPDATE_TOPIC = Rpc("UpdateTopic", lambda c: c.admin.UpdateTopic, rmq_pb2.UpdateTopicResponse)
_QUERY_MESSAGE_BY_KEY = Rpc("QueryMessageByKey", lambda c: c.messaging.QueryMessageByKey,
                            rmq_pb2.QueryMessageByKeyResponse)
_RECALL_MESSAGE = Rpc("RecallMessage", lambda c: c.messaging.RecallMessage, rmq_pb2.RecallMessageResponse)
_VIEW_MESSAGE = Rpc("ViewMessage", lambda c: c.admin.ViewMessage, rmq_pb2.ViewMessageResponse)
_GET_CONSUMER_CONNECTIONS = Rpc("GetConsumerConnections", lambda c: c.admin.GetConsumerConnections,
                                rmq_pb2.GetConsumerConnectionsResponse)
_RESET_CONSUMER_OFFSETS = Rpc("ResetConsumerOffsets", lambda c: c.admin.ResetConsumerOffsets,
                              rmq_pb2.ResetConsumerOffsetsResponse)
_GET_SUBSCRIPTION_GROUP = Rpc("GetSubscriptionGroup", lambda c: c.admin.GetSubscriptionGroup,
                              rmq_pb2.GetSubscriptionGroupResponse)
_DELETE_SUBSCRIPTION_GROUP = Rpc("DeleteSubscriptionGroup", lambda c: c.admin.DeleteSubscriptionGroup,
                                 rmq_pb2.DeleteSubscriptionGroupResponse)
_UPDATE_SUBSCRIPTION_GROUP = Rpc("UpdateSubscriptionGroup", lambda c: c.admin.UpdateSubscriptionGroup,
                                 rmq_pb2.UpdateSubscriptionGroupResponse)
_GET_CONSUMER_RUNNING_INFO = Rpc("GetConsumerRunningInfo", lambda c: c.admin.GetConsumerRunningInfo,
                                 rmq_pb2.GetConsumerRunningInfoResponse)
_GET_PRODUCER_CONNECTIONS = Rpc("GetProducerConnections", lambda c: c.admin.GetProducerConnections,
                                rmq_pb2.GetProducerConnectionsResponse)
_LIST_CONSUMER_GROUPS = Rpc("ListConsumerGroups", lambda c: c.admin.ListConsumerGroups,
                            rmq_pb2.ListConsumerGroupsResponse)
_GET_GROUP_STATS = Rpc("GetGroupStats", lambda c: c.admin.GetGroupStats, rmq_pb2.GetGroupStatsResponse)
_DESCRIBE_ACL = Rpc("DescribeAcl", lambda c: c.admin.DescribeAcl, rmq_pb2.DescribeAclResponse)


class RmqClient(ClientAPI):
    """Client for the brokers and name servers named by `endpoints` ("host:port[,host:port]"):
    the client API's calls and the admin calls (MQAdminImpl) below.

    Every call carries a deadline (`timeout` seconds, plus the hold time for long polling).
    Thread-safe: channels are cached per address and shared. With `access_key`/`secret_key`
    every call is signed; with `tls` (or a `tls_ca_file`) channels use TLS (ARCHITECTURE §5).
    """

    # ------------------------------------------------------------ topics

    def list_topics(self) -> list[TopicConfig]:
        """Topics known to any endpoint, sorted by name (queue numbers are per broker)."""
        topics: dict[str, TopicConfig] = {}
        for response in self._ask_all_endpoints(_LIST_TOPICS, rmq_pb2.ListTopicsRequest()):
            for t in response.topics:
                topics.setdefault(t.topic_name, TopicConfig.from_proto(t))
        return [topics[name] for name in sorted(topics)]

    def describe_controller(self) -> rmq_pb2.DescribeControllerResponse | None:
        """The leading controller's view of every broker group, asked of the endpoints (name servers
        with --controller) and then of the leader a follower names; None when no endpoint runs a
        controller or none answers."""
        addresses = list(self.endpoints)
        asked: set[str] = set()
        while addresses:
            address = addresses.pop(0)
            if address in asked:
                continue
            asked.add(address)
            try:
                answer = self._call(address, _DESCRIBE_CONTROLLER, rmq_pb2.DescribeControllerRequest())
            except RmqError:   # not a controller (UNIMPLEMENTED), or unreachable
                continue
            if not answer.not_leader:
                return answer
            if answer.leader_address:
                addresses.insert(0, answer.leader_address)
        return None

    def broker_status(self, address: str) -> rmq_pb2.BrokerStatusResponse:
        """Role, CommitLog offsets and replication state of the broker at `address`."""
        return self._call(address, _GET_BROKER_STATUS, rmq_pb2.BrokerStatusRequest())

    def create_topic(self, topic: str, queues: int = 8, perm: int = PERM_READ | PERM_WRITE) -> list[str]:
        """Create the topic on every broker the endpoints know; returns those brokers' names."""
        brokers = self.list_brokers()
        if not brokers:
            raise RmqUnavailable("no broker is registered", broker=",".join(self.endpoints))
        config = rmq_pb2.TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues,
                                     perm=perm)
        self.routes.forget(topic)
        self._on_each_broker(
            brokers, lambda name, address: self._call(address, _CREATE_TOPIC,
                                                      rmq_pb2.CreateTopicRequest(config=config), name))
        return list(brokers)

    def update_topic(self, topic: str, queues: int, perm: int | None = None) -> list[str]:
        """Grow the topic to `queues` read and write queues on every broker that holds it,
        setting `perm` (None: each broker's current perm); returns those brokers' names.
        Brokers refuse to shrink a topic (ILLEGAL_ARGUMENT)."""
        route = self.query_route(topic)
        perms = {q.broker_name: q.perm for q in route.queue_datas}
        self.routes.forget(topic)

        def update(name: str, address: str) -> None:
            config = rmq_pb2.TopicConfig(topic_name=topic, read_queue_nums=queues, write_queue_nums=queues,
                                         perm=perms[name] if perm is None else perm)
            self._call(address, _UPDATE_TOPIC, rmq_pb2.UpdateTopicRequest(config=config), name)

        self._on_each_broker(route.brokers, update)
        return list(route.brokers)

    def delete_topic(self, topic: str) -> None:
        """Delete the topic on every broker that holds it."""
        route = self.query_route(topic)
        self.routes.forget(topic)
        self._on_each_broker(
            route.brokers, lambda name, address: self._call(address, _DELETE_TOPIC,
                                                            rmq_pb2.DeleteTopicRequest(topic=topic), name))

    def browse_messages(self, mq: MessageQueue, offset: int, max_messages: int) -> PullResult:
        """Admin read of a queue whatever its topic's permission (a DLQ is write-only)."""
        request = rmq_pb2.BrowseMessagesRequest(topic=mq.topic, queue_id=mq.queue_id, offset=offset,
                                                max_messages=max_messages)
        response = self._call(self._broker_address(mq.broker_name), _BROWSE_MESSAGES, request,
                              mq.broker_name, queue=mq)
        return pull_result(response)

    def query_message_by_key(self, topic: str, broker_name: str, key: str, *, begin_ms: int = 0,
                             end_ms: int = 0, max_messages: int = 64) -> rmq_pb2.PackedMessages:
        """The topic's messages on one broker whose KEYS (or UNIQ_KEY) hold `key`, stored in
        [begin_ms, end_ms] (end 0: now), oldest first (RocketMQ queryMessage; at most 64)."""
        request = rmq_pb2.QueryMessageByKeyRequest(topic=topic, key=key, max_messages=max_messages,
                                                   begin_timestamp=begin_ms, end_timestamp=end_ms)
        return self._topic_call(topic, broker_name, _QUERY_MESSAGE_BY_KEY, request).messages

    def recall_message(self, recall_handle: str) -> None:
        """Cancel a timer message not yet delivered by the recall handle its send returned (RocketMQ
        5 recallMessage): its producer's account or an admin. Raises RmqError when the broker
        refuses (an altered handle, another account's, a message delivered or recalled already)."""
        topic, broker_name = recall_handle_target(recall_handle)
        request = rmq_pb2.RecallMessageRequest(topic=topic, recall_handle=recall_handle)
        self._call(self._broker_address(broker_name), _RECALL_MESSAGE, request, broker_name)

    def view_message(self, address: str, commit_log_offset: int) -> rmq_pb2.PackedMessages:
        """The record at a CommitLog offset of the broker at `address` (RocketMQ viewMessage)."""
        request = rmq_pb2.ViewMessageRequest(commit_log_offset=commit_log_offset)
        return self._call(address, _VIEW_MESSAGE, request).messages

    def consumer_connections(self, group: str, unreachable: dict[str, RmqUnavailable] | None = None
                             ) -> dict[str, list[rmq_pb2.ConsumerConnection]]:
        """broker name -> the group's live members it knows (every protocol), for every reachable
        broker group (RocketMQ examineConsumerConnectionInfo); the unreachable ones are recorded in
        `unreachable` when given."""
        request = rmq_pb2.GetConsumerConnectionsRequest(consumer_group=group)
        return {name: list(answer.connections) for name, answer in
                self._ask_every_broker(_GET_CONSUMER_CONNECTIONS, request, unreachable).items()}

    def producer_connections(self, group: str, unreachable: dict[str, RmqUnavailable] | None = None
                             ) -> dict[str, list[rmq_pb2.ProducerConnection]]:
        """broker name -> the producer group's live producers it knows (RocketMQ
        examineProducerConnectionInfo); `unreachable` as for consumer_connections."""
        request = rmq_pb2.GetProducerConnectionsRequest(producer_group=group)
        return {name: list(answer.connections) for name, answer in
                self._ask_every_broker(_GET_PRODUCER_CONNECTIONS, request, unreachable).items()}

    def _ask_every_broker(self, rpc: Rpc[ResponseT], request: Message,
                          unreachable: dict[str, RmqUnavailable] | None) -> dict[str, ResponseT]:
        answers: dict[str, ResponseT] = {}
        for name in self.list_brokers():
            read = functools.partial(self._read_call, name, rpc, request)
            with contextlib.suppress(RmqUnavailable):
                answer = unless_unreachable(read, name, unreachable)
                if answer is not None:
                    answers[name] = answer
        return answers

    def reset_consumer_offsets(self, group: str, offsets: dict[MessageQueue, int], force: bool = False
                               ) -> tuple[list[str], list[str]]:
        """RocketMQ's resetOffset (admin): commit `offsets` for the group on their brokers, each
        broker even when another fails (then the first failure is raised), and have the group's
        live consumers adopt them; refused while a live member cannot be told, unless `force`.
        Returns (the client ids told of the reset, the live members that could not be)."""
        notified: set[str] = set()
        untold: set[str] = set()
        grouped = by_broker(offsets)

        def reset(name: str) -> None:
            request = rmq_pb2.ResetConsumerOffsetsRequest(consumer_group=group, force=force, offsets=[
                rmq_pb2.ConsumerOffset(topic=mq.topic, queue_id=mq.queue_id, offset=offsets[mq])
                for mq in grouped[name]])
            # to the member the group reads from, which its consumers watch
            answer = self._read_call(name, _RESET_CONSUMER_OFFSETS, request)
            notified.update(answer.notified_client_ids)
            untold.update(answer.untold_client_ids)

        call_each(grouped, reset)
        return sorted(notified), sorted(untold)

    def consumer_running_info(self, group: str, client_id: str) -> rmq_pb2.ConsumerRunningInfo:
        """A live rmq consumer's running info (RocketMQ getConsumerRunningInfo), asked through the
        first broker it watches; the last refusal when none could ask it."""
        request = rmq_pb2.GetConsumerRunningInfoRequest(consumer_group=group, client_id=client_id)
        failure: RmqError | None = None
        for name in self.list_brokers():
            try:
                return self._read_call(name, _GET_CONSUMER_RUNNING_INFO, request).info
            except RmqError as error:
                failure = error
        raise failure or RmqUnavailable(f"no broker to ask for the running info of {client_id}")

    def subscription_groups(self, group: str, unreachable: dict[str, RmqUnavailable] | None = None
                            ) -> dict[str, rmq_pb2.GetSubscriptionGroupResponse]:
        """broker name -> the group's settings on that broker's master (RocketMQ
        examineSubscriptionGroupConfig); `unreachable` as for topic_offsets."""
        request = rmq_pb2.GetSubscriptionGroupRequest(consumer_group=group)
        settings: dict[str, rmq_pb2.GetSubscriptionGroupResponse] = {}
        for name, address in self.list_brokers().items():
            ask = functools.partial(self._call, address, _GET_SUBSCRIPTION_GROUP, request, name)
            answer = unless_unreachable(ask, name, unreachable)
            if answer is not None:
                settings[name] = answer
        return settings

    def update_subscription_group(self, broker_name: str, config: rmq_pb2.SubscriptionGroupConfig) -> None:
        """Store the group's settings on the broker's master (admin; RocketMQ updateSubGroup)."""
        self._call(self._broker_address(broker_name), _UPDATE_SUBSCRIPTION_GROUP,
                   rmq_pb2.UpdateSubscriptionGroupRequest(config=config), broker_name)

    def delete_subscription_group(self, broker_name: str, group: str) -> bool:
        """Forget the group's stored settings on the broker's master (admin; RocketMQ
        deleteSubGroup); False when it had none."""
        answer = self._call(self._broker_address(broker_name), _DELETE_SUBSCRIPTION_GROUP,
                            rmq_pb2.DeleteSubscriptionGroupRequest(consumer_group=group), broker_name)
        return answer.deleted

    def list_consumer_groups(self, unreachable: dict[str, RmqUnavailable] | None = None) -> list[str]:
        """Every consumer group some broker knows from any source (live members of every protocol,
        committed offsets, retry and dead-letter topics), as far as this account may see them;
        `unreachable` as for topic_offsets."""
        groups: set[str] = set()
        for name in self.list_brokers():
            read = functools.partial(self._read_call, name, _LIST_CONSUMER_GROUPS,
                                     rmq_pb2.ListConsumerGroupsRequest())
            answer = unless_unreachable(read, name, unreachable)
            if answer is not None:
                groups.update(answer.groups)
        return sorted(groups)

    def group_stats(self, group: str, unreachable: dict[str, RmqUnavailable] | None = None
                    ) -> dict[str, list[rmq_pb2.GroupTopicStats]]:
        """broker name -> what the group's pulls took from it per topic (messages since the broker
        started, the last pull that returned any); `unreachable` as for topic_offsets."""
        request = rmq_pb2.GetGroupStatsRequest(consumer_group=group)
        stats: dict[str, list[rmq_pb2.GroupTopicStats]] = {}
        for name in self.list_brokers():
            read = functools.partial(self._read_call, name, _GET_GROUP_STATS, request)
            answer = unless_unreachable(read, name, unreachable)
            if answer is not None:
                stats[name] = list(answer.topics)
        return stats

    def describe_acl(self, address: str) -> rmq_pb2.DescribeAclResponse:
        """The ACL of the broker at `address`: accounts and permissions, no secret (admins only)."""
        return self._call(address, _DESCRIBE_ACL, rmq_pb2.DescribeAclRequest())


def recall_handle_target(recall_handle: str) -> tuple[str, str]:
    """(topic, broker name) a recall handle names (docs/internals/timer.md §Recall); ConfigError
    when it is not a recall handle at all (the broker checks the rest)."""
    try:
        fields = base64.urlsafe_b64decode(recall_handle.encode()).decode().split("\n")
    except (ValueError, binascii.Error, UnicodeError):
        fields = []
    if len(fields) != 6:
        raise ConfigError(f"{recall_handle[:60]!r} is not a recall handle")
    return fields[0], fields[1]
