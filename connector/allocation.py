"""Queue allocation strategies for clustering consumers (spec consumer-pull-rebalance §8.5,
consumption-longpolling-offsets §11.3).

`allocate(strategy, current_cid, mq_all, cid_all)` sorts both lists first, as
RebalanceImpl does, so every member of a group computes the same partition of the queues:
each queue goes to exactly one consumer, extra consumers get nothing.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from rmq.connector.errors import ConfigError

logger = logging.getLogger(__name__)

Q = TypeVar("Q", bound=Any)   # a sortable queue (MessageQueue orders by topic, broker, queue id)



class AllocateStrategy(enum.StrEnum):
    """AllocateMessageQueueStrategy: how a clustering group splits a topic's queues."""

    AVG = "avg"        # AllocateMessageQueueAveragely
    CIRCLE = "circle"  # AllocateMessageQueueAveragelyByCircle


STRATEGY_NAMES = tuple(strategy.value for strategy in AllocateStrategy)


def allocate_averagely(index: int, mq_all: Sequence[Q], consumer_count: int) -> list[Q]:
    """AllocateMessageQueueAveragely ("AVG"): contiguous blocks, the first `mod` consumers
    one queue more."""
    n = len(mq_all)
    mod = n % consumer_count
    if n <= consumer_count:
        average_size = 1
    elif mod > 0 and index < mod:
        average_size = n // consumer_count + 1
    else:
        average_size = n // consumer_count
    start_index = index * average_size if mod > 0 and index < mod else index * average_size + mod
    size = min(average_size, n - start_index)   # <= 0 for idle consumers
    return [mq_all[(start_index + i) % n] for i in range(size)]


def allocate_by_circle(index: int, mq_all: Sequence[Q], consumer_count: int) -> list[Q]:
    """AllocateMessageQueueAveragelyByCircle ("AVG_BY_CIRCLE"): queues dealt one by one."""
    return [mq_all[i] for i in range(index, len(mq_all), consumer_count)]


STRATEGIES: dict[AllocateStrategy, Callable[[int, Sequence[Any], int], list[Any]]] = {
    AllocateStrategy.AVG: allocate_averagely,
    AllocateStrategy.CIRCLE: allocate_by_circle,
}


def allocate_strategy(name: AllocateStrategy | str) -> AllocateStrategy:
    """The strategy called `name` (ConfigError, also a ValueError, naming the accepted ones)."""
    try:
        return AllocateStrategy(name)
    except ValueError:
        raise ConfigError(f"unknown allocation strategy {name!r}: expected one of "
                          f"{', '.join(STRATEGY_NAMES)}") from None


def allocate(strategy: AllocateStrategy | str, current_cid: str, mq_all: Sequence[Q],
             cid_all: Sequence[str]) -> list[Q]:
    """The queues of `mq_all` that `current_cid` owns among `cid_all`.

    Raises ConfigError (a ValueError) for an unknown strategy or empty inputs (the spec's
    IllegalArgumentException); a `current_cid` missing from `cid_all` owns nothing.
    """
    chosen = allocate_strategy(strategy)
    if not current_cid:
        raise ConfigError("currentCID is empty")
    if not mq_all:
        raise ConfigError("mqAll is null or mqAll empty")
    if not cid_all:
        raise ConfigError("cidAll is null or cidAll empty")
    cids = sorted(cid_all)
    if current_cid not in cids:
        logger.warning("[BUG] The consumerId: %s not in cidAll: %s", current_cid, cids)
        return []
    return STRATEGIES[chosen](cids.index(current_cid), sorted(mq_all), len(cids))


def allocate_topic(strategy: AllocateStrategy | str, client_id: str, mq_all: Sequence[Q],
                   cid_all: Sequence[str], broadcasting: bool) -> list[Q] | None:
    """rebalanceByTopic's allocation of a topic's queues, the one rule for RebalanceImpl and the Spark
    source's membership: every queue when broadcasting, else the strategy's share of the sorted
    queues among the sorted consumer ids; None when clustering has nothing to allocate by (no
    queues, or no consumers)."""
    if broadcasting:
        return sorted(mq_all)
    if not mq_all or not cid_all:
        return None
    return allocate(strategy, client_id, mq_all, cid_all)
