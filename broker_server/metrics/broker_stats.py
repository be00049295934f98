"""Put and get counters (RocketMQ BrokerStatsManager: TOPIC_PUT_NUMS / TOPIC_PUT_SIZE per topic,
GROUP_GET_NUMS / GROUP_GET_SIZE and SNDBCK2DLQ_TIMES per topic and group). Bounded: per topic by the
topics the broker holds (a deleted topic's counters go with it); per (topic, group) by
MAX_GROUP_SERIES pairs, past which new pairs count under the group OTHER_GROUPS, so a client
inventing group names cannot grow the table or the /metrics page.

Group names are label values clients choose, so which of them /metrics names is bounded too
(GroupLabels): at most `max_metric_groups` names in all and `max_metric_groups_per_account` first
seen from one account (BrokerConfig), each at most MAX_LABEL_CHARS long; every other group is
counted under OTHER_GROUPS, in these counters and in the collectors' per-group lag."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime

MAX_GROUP_SERIES = 10_000
OTHER_GROUPS = "_other"
MAX_METRIC_GROUPS = 1_000
MAX_METRIC_GROUPS_PER_ACCOUNT = 32
MAX_LABEL_CHARS = 255          # RocketMQ's longest group name


class GroupLabels:
    """The consumer group names /metrics may write as label values: the first `max_groups` seen,
    at most `max_per_account` of them first seen from one account (without --acl every caller is
    the one anonymous account "" and only the total applies). A name once admitted stays."""

    def __init__(self, max_groups: int = MAX_METRIC_GROUPS,
                 max_per_account: int = MAX_METRIC_GROUPS_PER_ACCOUNT) -> None:
        self.max_groups = max_groups
        self.max_per_account = max_per_account
        self._admitted: set[str] = set()
        self._per_account: Counter[str] = Counter()
        self._lock = threading.Lock()

    def label(self, group: str, account: str) -> str:
        """`group`, or OTHER_GROUPS when naming it would pass a bound."""
        with self._lock:
            if group in self._admitted:
                return group
            if (len(group) > MAX_LABEL_CHARS or len(self._admitted) >= self.max_groups
                    or (account and self._per_account[account] >= self.max_per_account)):
                return OTHER_GROUPS
            self._admitted.add(group)
            self._per_account[account] += 1
            return group


@dataclass
class TopicCounters:
    put_messages: int = 0
    put_bytes: int = 0
    get_messages: int = 0
    get_bytes: int = 0


@dataclass
class GroupCounters:
    get_messages: int = 0
    get_bytes: int = 0
    send_to_dlq: int = 0
    last_get_ms: int = 0          # when a pull last returned messages of the topic to the group


@dataclass(frozen=True)
class Today:
    """The broker's puts and gets since local midnight (RocketMQ's msgPutTotalTodayNow minus
    msgPutTotalTodayMorning, and the same for gets), and since it started."""

    put_messages: int
    get_messages: int
    put_total: int
    get_total: int


class BrokerStatsManager:
    def __init__(self, max_group_series: int = MAX_GROUP_SERIES, labels: GroupLabels | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.labels = labels or GroupLabels()
        self._topics: dict[str, TopicCounters] = {}
        self._groups: dict[tuple[str, str], GroupCounters] = {}
        self._max_group_series = max_group_series
        self._lock = threading.Lock()
        self._clock = clock
        self._put_total = 0            # every put and get since the broker started (deleted topics too)
        self._get_total = 0
        self._morning = (self._day(), 0, 0)    # (day, put total, get total) when the day began

    def record_put(self, topic: str, messages: int, size: int) -> None:
        with self._lock:
            self._put_total += messages
            counters = self._topics.get(topic)   # no TopicCounters built per put
            if counters is None:
                counters = self._topics[topic] = TopicCounters()
            counters.put_messages += messages
            counters.put_bytes += size

    def record_get(self, topic: str, messages: int, size: int, group: str = "", account: str = "") -> None:
        """`account`: the puller's (whose share a new group name counts in)."""
        now_ms = int(self._clock() * 1000)
        with self._lock:
            self._get_total += messages
            counters = self._topics.setdefault(topic, TopicCounters())
            counters.get_messages += messages
            counters.get_bytes += size
            by_group = self._group_counters(topic, group, account)
            by_group.get_messages += messages
            by_group.get_bytes += size
            by_group.last_get_ms = now_ms

    def record_send_to_dlq(self, topic: str, group: str, account: str = "") -> None:
        """A message of `topic` moved to `group`'s dead-letter queue (sent back by `account`)."""
        with self._lock:
            self._group_counters(topic, group, account).send_to_dlq += 1

    def _group_counters(self, topic: str, group: str, account: str) -> GroupCounters:
        key = (topic, self.labels.label(group, account) if group else group)
        if key not in self._groups and len(self._groups) >= self._max_group_series:
            key = (topic, OTHER_GROUPS)
        return self._groups.setdefault(key, GroupCounters())

    def remove_topic(self, topic: str) -> None:
        with self._lock:
            self._topics.pop(topic, None)
            for key in [key for key in self._groups if key[0] == topic]:
                del self._groups[key]

    def snapshot(self) -> dict[str, TopicCounters]:
        with self._lock:
            return {topic: TopicCounters(**vars(counters)) for topic, counters in self._topics.items()}

    def group_snapshot(self) -> dict[tuple[str, str], GroupCounters]:
        """(topic, group) → its counters."""
        with self._lock:
            return {key: GroupCounters(**vars(counters)) for key, counters in self._groups.items()}

    def of_group(self, group: str) -> dict[str, GroupCounters]:
        """topic → the counters of `group` on it (what its consumers pulled, and when last)."""
        with self._lock:
            return {topic: GroupCounters(**vars(counters)) for (topic, name), counters in self._groups.items()
                    if name == group}

    def mark_day(self) -> None:
        """At a new local day, remember the totals the day starts from (the broker calls this every
        minute, RocketMQ's BrokerStats.record at midnight)."""
        today = self._day()
        with self._lock:
            if self._morning[0] != today:
                self._morning = (today, self._put_total, self._get_total)

    def today(self) -> Today:
        self.mark_day()
        with self._lock:
            _, put_morning, get_morning = self._morning
            return Today(self._put_total - put_morning, self._get_total - get_morning,
                         self._put_total, self._get_total)

    def _day(self) -> date:
        return datetime.fromtimestamp(self._clock()).date()
