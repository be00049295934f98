"""What a consumer checks before it joins its group, and which refusals it gives up on
(DefaultMQPushConsumerImpl#checkConfig, MQClientInstance#checkClientInBroker; see
docs/client-behaviour.md "Consumers fail fast").

RocketMQ validates the group name when a consumer starts and asks each broker whether it
accepts the consumer's subscription type, raising from `start()`. A refusal that will not go
away by waiting (no permission, an illegal name, a filter the broker does not support or
cannot parse) is raised there, and a pull refused that way later (permission aside: see
START_REFUSALS) stops the consumer instead of being retried for ever. Everything else (an
unreachable broker, a bound reached) is transient and left to the consumer's retries.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from rmq.connector.client import MessageQueue, RmqClient
from rmq.connector.errors import RmqError
from rmq.connector.rebalance_impl import SubscriptionData
from rmq.v1 import rmq_pb2

logger = logging.getLogger(__name__)

# Refusals of a pull that waiting will not cure.
PERMANENT_PULL_REFUSALS = frozenset({
    rmq_pb2.GROUP_ILLEGAL,
    rmq_pb2.TOPIC_ILLEGAL,
    rmq_pb2.FILTER_NOT_SUPPORTED,
    rmq_pb2.SUBSCRIPTION_PARSE_FAILED,
})
# At start-up also a missing permission (the heartbeat's ACL check on the group and topics).
# Later, NO_PERMISSION is retried like RocketMQ's clients do: a topic made unreadable for a
# while (perm 2, as when a broker is drained) is read again once its permission comes back.
START_REFUSALS = PERMANENT_PULL_REFUSALS | {rmq_pb2.NO_PERMISSION}


def is_permanent_refusal(error: RmqError | None) -> bool:
    """A pull refused for good (the consumer stops the queue and reports it)."""
    return error is not None and error.code in PERMANENT_PULL_REFUSALS


def check_client_in_broker(client: RmqClient, group: str, subscriptions: Iterable[SubscriptionData],
                           heartbeat: Callable[[], None]) -> None:
    """Heartbeat once (the broker checks the group name and SUB permission on the group and
    every subscribed topic), then probe each broker of every SQL92 subscription with one pull
    that is not held (the broker checks that it filters by SQL92 and parses the expression).
    A permanent refusal is raised; a transient failure is logged and left to the retries."""
    try:
        heartbeat()
        for subscription in subscriptions:
            if subscription.selector.is_sql:
                _probe_filter(client, group, subscription)
    except RmqError as error:
        if error.code in START_REFUSALS:
            raise
        logger.warning("checking consumer group %s in the brokers failed (retried later): %s", group, error)


def _probe_filter(client: RmqClient, group: str, subscription: SubscriptionData) -> None:
    first_queues: dict[str, MessageQueue] = {}
    for mq in client.query_route(subscription.topic).message_queues:
        first_queues.setdefault(mq.broker_name, mq)
    for mq in first_queues.values():
        client.pull(mq, 0, 1, group=group, sub_expression=subscription.selector)
