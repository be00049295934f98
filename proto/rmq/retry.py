"""Retry and dead-letter vocabulary shared by the broker and the client SDK (RocketMQ MixAll
getRetryTopic / getDLQTopic, MessageConst; spec consumer-pull-rebalance §18, TV-14;
consumption-longpolling-offsets §13).

A consumer group's failed messages are sent back to the broker, which stores a copy in the
group's retry topic `%RETRY%<group>` (delayed by a delay level) or, after
`max_reconsume_times` attempts, in its dead-letter queue `%DLQ%<group>`. The copy keeps the
original topic and message id in properties.
"""

from __future__ import annotations

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"

# Properties a sent-back copy carries (MessageConst names).
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"              # the topic the message was first sent to
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"  # the first copy's message id
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"

DEFAULT_MAX_RECONSUME_TIMES = 16   # SubscriptionGroupConfig.retryMaxTimes
RETRY_QUEUE_NUMS = 1               # SubscriptionGroupConfig.retryQueueNums
DLQ_NUMS_PER_GROUP = 1             # MixAll.DLQ_NUMS_PER_GROUP
FIRST_RETRY_DELAY_LEVEL = 3        # delay level = 3 + reconsumeTimes when the client sends 0


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_group_copy_topic(topic: str) -> bool:
    """A retry or dead-letter topic, whose messages carry their original topic in RETRY_TOPIC."""
    return topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))


def group_of_copy_topic(topic: str) -> str:
    """The group whose retry or dead-letter topic this is; "" for any other topic."""
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if topic.startswith(prefix):
            return topic[len(prefix):]
    return ""


def retry_delay_level(client_level: int, reconsume_times: int) -> int:
    """The level a retried copy waits at: the client's (> 0) or 3 + reconsumeTimes (0)."""
    return client_level if client_level > 0 else FIRST_RETRY_DELAY_LEVEL + reconsume_times


def goes_to_dlq(client_level: int, reconsume_times: int, max_reconsume_times: int) -> bool:
    """consumerSendMsgBack: a negative level or too many attempts means the DLQ."""
    return client_level < 0 or reconsume_times >= max_reconsume_times
