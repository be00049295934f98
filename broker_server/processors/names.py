"""The broker's checks of topic and consumer group names: the rules of `rmq.names`
answered as TOPIC_ILLEGAL / GROUP_ILLEGAL; system topics and prefixes are reserved for the
broker (RocketMQ TopicValidator)."""

from __future__ import annotations

from rmq.broker_server.errors import BrokerError
from rmq.names import group_name_problem, topic_name_problem
from rmq.retry import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from rmq.v1 import rmq_pb2

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"
TIMER_TOPIC = SYSTEM_TOPIC_PREFIX + "wheel_timer"   # RocketMQ 5 TimerMessageStore.TIMER_TOPIC
AUTO_CREATE_TOPIC_KEY = "TBW102"   # TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC
RESERVED_TOPICS = frozenset({SCHEDULE_TOPIC, AUTO_CREATE_TOPIC_KEY, "OFFSET_MOVED_EVENT", "SELF_TEST_TOPIC"})
RESERVED_TOPIC_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX, SYSTEM_TOPIC_PREFIX)


def check_topic_name(topic: str) -> None:
    """Refuse (TOPIC_ILLEGAL) a name no topic can have: empty, too long, bad characters."""
    problem = topic_name_problem(topic)
    if problem is not None:
        raise BrokerError(rmq_pb2.TOPIC_ILLEGAL, problem)


def is_reserved_topic(topic: str) -> bool:
    """A topic only the broker writes: retry, dead-letter, schedule and system topics."""
    return topic in RESERVED_TOPICS or topic.startswith(RESERVED_TOPIC_PREFIXES)


def check_user_topic_name(topic: str) -> None:
    """Refuse (TOPIC_ILLEGAL) names users may not create: illegal or reserved for the broker."""
    check_topic_name(topic)
    if is_reserved_topic(topic):
        raise BrokerError(rmq_pb2.TOPIC_ILLEGAL, f"topic name {topic!r} is reserved for the broker")


def check_group_name(group: str) -> None:
    """Refuse (GROUP_ILLEGAL) an empty, too long or badly spelled consumer group name."""
    problem = group_name_problem(group)
    if problem is not None:
        raise BrokerError(rmq_pb2.GROUP_ILLEGAL, problem)
