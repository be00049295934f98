"""The permission each rmq.v1 RPC needs, after RocketMQ's PlainAccessResource.parse:
sending needs PUB on the topic; pulling, offsets, membership and locks need SUB on the group
(and on the topics they name); reading a topic's offsets or messages by key needs SUB or PUB
on it; topic administration needs an admin account, reading every topic's offsets of a group
(QueryConsumerOffsets without a topic) too; a broker registers only under the broker name of
its account (`brokerName`, or an admin account); route and list queries need only a valid
signature. A method missing from the table needs admin (fail closed). Calls that name a
consumer client id must come from the account that registered it (client_id_owners).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf.message import Message

from rmq.broker_server.security.acl import Acl, Need, Requirement, ResourceKind

TOPIC, GROUP = ResourceKind.TOPIC, ResourceKind.GROUP
BROKER, CLUSTER = ResourceKind.BROKER, ResourceKind.CLUSTER


Rule = Callable[[Any], Iterable[Requirement]]   # the request message of the RPC


def _nothing(_request: Message) -> list[Requirement]:
    return []


def _topics(topics: Iterable[str], need: Need = Need.SUB) -> list[Requirement]:
    return [Requirement(TOPIC, topic, need) for topic in sorted(set(topics)) if topic]


def _admin(what: str) -> list[Requirement]:
    return [Requirement(CLUSTER, what, Need.ANY)]


def _group_sub(request: Any) -> list[Requirement]:
    return [Requirement(GROUP, request.consumer_group, Need.SUB)]


def _producer_group(request: Any) -> list[Requirement]:
    return [Requirement(GROUP, request.producer_group, Need.ANY)]


def _group_and_offset_topics(request: Any) -> list[Requirement]:
    return _group_sub(request) + _topics(o.topic for o in request.offsets)


def _group_and_queue_topics(request: Any) -> list[Requirement]:
    return _group_sub(request) + _topics(q.topic for q in request.queues)


def _group_and_subscription_topics(request: Any) -> list[Requirement]:
    return _group_sub(request) + _topics(s.topic for s in request.subscriptions)


def _group_and_topic_or_every_topic(request: Any) -> list[Requirement]:
    if request.topic:
        return _group_sub(request) + _topics([request.topic])
    return _group_sub(request) + _admin("QueryConsumerOffsets without a topic (every topic's offsets)")


def _broker(name: str) -> list[Requirement]:
    return [Requirement(BROKER, name, Need.ANY)]


def _rule(service: str, method: str) -> str:
    return f"/rmq.v1.{service}/{method}"


RULES: dict[str, Rule] = {
    _rule("MessagingService", "SendMessage"): lambda r: _topics([r.topic], Need.PUB),
    _rule("MessagingService", "RecallMessage"): lambda r: _topics([r.topic], Need.PUB),
    _rule("MessagingService", "PullMessage"): lambda r: _topics([r.topic]) + _group_sub(r),
    _rule("Flight", "DoGet"): lambda r: _topics([r.pull.topic]) + _group_sub(r.pull),   # rmq.flight: a pull
    _rule("MessagingService", "GetTopicOffsets"): lambda r: _topics([r.topic], Need.ANY),
    _rule("MessagingService", "SearchOffset"): lambda r: _topics([r.topic], Need.ANY),
    _rule("MessagingService", "QueryConsumerOffsets"): _group_and_topic_or_every_topic,
    _rule("MessagingService", "UpdateConsumerOffsets"): _group_and_offset_topics,
    _rule("MessagingService", "RemoveConsumerOffsets"): _group_and_offset_topics,
    _rule("MessagingService", "Heartbeat"): _group_and_subscription_topics,
    _rule("MessagingService", "UnregisterClient"): _group_sub,
    _rule("MessagingService", "GetConsumerList"): _group_sub,
    _rule("MessagingService", "LockBatchMQ"): _group_and_queue_topics,
    _rule("MessagingService", "UnlockBatchMQ"): _group_and_queue_topics,
    _rule("MessagingService", "QueryMessageByKey"): lambda r: _topics([r.topic]),
    _rule("MessagingService", "ConsumerSendMsgBack"): _group_sub,
    _rule("MessagingService", "WatchConsumerIds"): _group_sub,
    _rule("MessagingService", "ReportRunningInfo"): _group_sub,
    _rule("RouteService", "QueryRoute"): _nothing,
    _rule("RouteService", "ListTopics"): _nothing,
    _rule("RouteService", "ListBrokers"): _nothing,
    _rule("AdminService", "GetBrokerStatus"): _nothing,   # role and offsets, like ListBrokers
    _rule("AdminService", "GetConsumerConnections"): _group_sub,   # the group's members, like GetConsumerList
    _rule("AdminService", "ListConsumerGroups"): _nothing,   # answers only the groups the caller may SUB
    _rule("AdminService", "GetSubscriptionGroup"): _group_sub,   # the group's settings, to its consumers
    _rule("AdminService", "GetConsumerRunningInfo"): _group_sub,   # a member's queues, like its connections
    _rule("AdminService", "GetProducerConnections"): _producer_group,
    _rule("AdminService", "GetGroupStats"): _group_sub,   # what the group pulled, like its members
    _rule("NameServerService", "RegisterBroker"): lambda r: _broker(r.broker.broker_name),
    _rule("NameServerService", "UnregisterBroker"): lambda r: _broker(r.broker_name),
    _rule("ControllerService", "Heartbeat"): lambda r: _broker(r.broker_name),
    _rule("ControllerService", "DescribeController"): _nothing,   # roles and epochs, like ListBrokers
}

ADMIN_METHODS = frozenset({
    _rule("AdminService", "CreateTopic"),
    _rule("AdminService", "DeleteTopic"),
    _rule("AdminService", "UpdateTopic"),
    _rule("AdminService", "BrowseMessages"),
    _rule("AdminService", "ViewMessage"),   # names no topic the ACL could check before the read
    _rule("AdminService", "ResetConsumerOffsets"),   # moves every member of the group (resetOffset)
    _rule("AdminService", "UpdateSubscriptionGroup"),   # updateSubGroup
    _rule("AdminService", "DeleteSubscriptionGroup"),   # deleteSubGroup
    _rule("AdminService", "DescribeAcl"),   # every account and its permissions
    # replication: a slave copies everything, so its account (RMQ_ACCESS_KEY) must be an admin
    _rule("HAService", "Transfer"),
    _rule("HAService", "SlaveSynchronize"),
})

CLIENT_ID_METHODS = frozenset({
    _rule("MessagingService", "Heartbeat"),
    _rule("MessagingService", "UnregisterClient"),
    _rule("MessagingService", "LockBatchMQ"),
    _rule("MessagingService", "UnlockBatchMQ"),
    _rule("MessagingService", "WatchConsumerIds"),
    _rule("MessagingService", "ReportRunningInfo"),
})


def check_call(acl: Acl, access_key: str, method: str, request: Message) -> None:
    """Raise AccessDenied naming the first missing permission of this call."""
    rule = RULES.get(method)
    acl.check_all(access_key, rule(request) if rule is not None else _admin(method))


def client_id_of(method: str, request: Any) -> str | None:
    """The consumer client id the call acts for, when it names one."""
    return request.client_id if method in CLIENT_ID_METHODS else None
