"""Topic and consumer group names (RocketMQ Validators / TopicValidator): at most 127
characters for topics (the record stores the length in one signed byte), 255 for groups,
characters `[%|a-zA-Z0-9_-]`; system topics and prefixes are reserved for the broker."""

from __future__ import annotations

import re

from rmq.broker_server.status import RequestError, rmq_pb2
from rmq.message_format import MAX_TOPIC_LENGTH
from rmq.retry import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

VALID_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
MAX_GROUP_LENGTH = 255

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
RESERVED_TOPICS = frozenset({SCHEDULE_TOPIC, "TBW102", "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC"})
RESERVED_TOPIC_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, SYSTEM_TOPIC_PREFIX)


def check_topic_name(topic: str) -> None:
    """Refuse (TOPIC_ILLEGAL) a name no topic can have: empty, too long, bad characters."""
    if not topic:
        raise RequestError(rmq_pb2.TOPIC_ILLEGAL, "topic name is empty")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise RequestError(
            rmq_pb2.TOPIC_ILLEGAL,
            f"topic name is {len(topic)} characters long, the maximum is {MAX_TOPIC_LENGTH}",
        )
    if not VALID_NAME.match(topic):
        raise RequestError(
            rmq_pb2.TOPIC_ILLEGAL,
            f"topic name {topic!r} may only contain letters, digits, '%', '|', '_' and '-'",
        )


def check_user_topic_name(topic: str) -> None:
    """Refuse (TOPIC_ILLEGAL) names users may not create: illegal or reserved for the broker."""
    check_topic_name(topic)
    if topic in RESERVED_TOPICS or topic.startswith(RESERVED_TOPIC_PREFIXES):
        raise RequestError(rmq_pb2.TOPIC_ILLEGAL, f"topic name {topic!r} is reserved for the broker")


def check_group_name(group: str) -> None:
    """Refuse (GROUP_ILLEGAL) an empty, too long or badly spelled consumer group name."""
    if not group:
        raise RequestError(rmq_pb2.GROUP_ILLEGAL, "consumer group is empty")
    if len(group) > MAX_GROUP_LENGTH:
        raise RequestError(
            rmq_pb2.GROUP_ILLEGAL,
            f"consumer group is {len(group)} characters long, the maximum is {MAX_GROUP_LENGTH}",
        )
    if not VALID_NAME.match(group):
        raise RequestError(
            rmq_pb2.GROUP_ILLEGAL,
            f"consumer group {group!r} may only contain letters, digits, '%', '|', '_' and '-'",
        )
