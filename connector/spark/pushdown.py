"""Filter pushdown for batch reads (`spark.read.format("rmq")...filter(...)`): the filters
Spark hands to `pushFilters` narrow what is pulled, and Spark still evaluates every one of
them on the rows (so a conservative narrowing is always correct):

    tags = / IN          the pull's sub-expression (the broker filters by tag hash code)
    topic, broker_name, queue_id = / IN (queue_id also <, <=, >, >=)   fewer queues
    queue_offset <, <=, >, >=, =                                      a narrower offset range
    store_timestamp <, <=, >, >=, =   offsets found by the broker's timestamp search

Spark passes filters to Python sources only with `spark.sql.python.filterPushdown.enabled`
set to true."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from rmq.connector.spark.options import PullSettings
from rmq.message_queue import MessageQueue

_RANGE_FILTERS = (GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual, EqualTo)


@dataclass
class Narrowing:
    """What the pushed filters allow: value sets (None: any) and offset / time bounds."""

    values: dict[str, set[object]] = field(default_factory=dict)   # topic, broker_name, queue_id, tags
    offset_low: int = 0                  # queue_offset >= offset_low
    offset_high: float = math.inf        # queue_offset < offset_high
    time_low_ms: int | None = None       # store_timestamp >= (ms)
    time_high_ms: int | None = None      # store_timestamp < (ms)
    pushed: list[Filter] = field(default_factory=list)

    def push(self, filters: Iterable[Filter]) -> None:
        for spark_filter in filters:
            if self._take(spark_filter):
                self.pushed.append(spark_filter)

    def _take(self, spark_filter: Filter) -> bool:
        column = getattr(spark_filter, "attribute", ("",))
        name = column[0] if len(column) == 1 else ""
        if name in ("topic", "broker_name", "queue_id", "tags") and isinstance(spark_filter, EqualTo | In):
            values = {spark_filter.value} if isinstance(spark_filter, EqualTo) else set(spark_filter.value)
            self.values[name] = values if name not in self.values else self.values[name] & values
            return True
        if name == "queue_offset" and isinstance(spark_filter, _RANGE_FILTERS):
            low, high = _bounds(spark_filter, int(spark_filter.value))
            self.offset_low, self.offset_high = max(self.offset_low, low), min(self.offset_high, high)
            return True
        if name == "store_timestamp" and isinstance(spark_filter, _RANGE_FILTERS):
            stamp = _epoch_ms(spark_filter.value)
            # conservative at millisecond precision: Spark re-checks every row
            low, high = _bounds(spark_filter, stamp)
            if low > 0:
                self.time_low_ms = max(self.time_low_ms or 0, math.floor(low) - 1)
            if high != math.inf:
                self.time_high_ms = min(self.time_high_ms or int(high) + 1, int(high) + 1)
            return True
        return False

    def allows(self, mq: MessageQueue) -> bool:
        return all(value in self.values.get(name, (value,)) for name, value in (
            ("topic", mq.topic), ("broker_name", mq.broker_name), ("queue_id", mq.queue_id)))

    def brokers(self) -> set[str] | None:
        """The broker names a pushed broker_name filter allows (None: any)."""
        wanted = self.values.get("broker_name")
        return None if wanted is None else {str(name) for name in wanted}

    def pull_settings(self, pull: PullSettings) -> PullSettings | None:
        """The pull with the tags filter folded into its sub-expression; None when no tag can match."""
        wanted = self.values.get("tags")
        if wanted is None:
            return pull
        tags = {str(tag) for tag in wanted if tag}
        if pull.tags is not None:
            tags &= pull.tags
        if not tags:
            return None
        if pull.sql_filter is not None:
            quoted = ", ".join("'" + tag.replace("'", "''") + "'" for tag in sorted(tags))
            return replace(pull, sql_filter=f"({pull.sql_filter}) AND TAGS IN ({quoted})")
        return replace(pull, sub_expression=" || ".join(sorted(tags)), tags=frozenset(tags))

    def clamp(self, start: int, end: int) -> tuple[int, int]:
        low = max(start, self.offset_low)
        high = end if self.offset_high == math.inf else min(end, int(self.offset_high))
        return low, max(low, high)


def _bounds(spark_filter: Filter, value: int) -> tuple[int, float]:
    """[low, high) of integers the comparison allows."""
    match spark_filter:
        case GreaterThan():
            return value + 1, math.inf
        case GreaterThanOrEqual():
            return value, math.inf
        case LessThan():
            return 0, value
        case LessThanOrEqual():
            return 0, value + 1
    return value, value + 1   # EqualTo


def _epoch_ms(value: object) -> int:
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return math.floor(aware.timestamp() * 1000)
    raise TypeError(f"not a timestamp: {value!r}")

