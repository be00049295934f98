"""topicPattern: the topics a pattern subscription reads now, listed through the endpoints
(name servers or brokers) at each micro-batch or batch read. Retry and dead-letter topics
(`%RETRY%<group>`, `%DLQ%<group>`) are the broker's own and never match."""

from __future__ import annotations

from rmq.connector.client import RmqClient
from rmq.connector.spark.options import SourceOptions
from rmq.retry import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

INTERNAL_PREFIXES = (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)


def matching_topics(client: RmqClient, options: SourceOptions) -> tuple[str, ...]:
    """The existing topics option topicPattern matches (whole name), sorted."""
    return tuple(
        config.topic_name for config in client.list_topics()
        if not config.topic_name.startswith(INTERNAL_PREFIXES) and options.subscribes(config.topic_name)
    )
