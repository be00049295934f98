"""Put and get counters (RocketMQ BrokerStatsManager: TOPIC_PUT_NUMS / TOPIC_PUT_SIZE per topic,
GROUP_GET_NUMS / GROUP_GET_SIZE and SNDBCK2DLQ_TIMES per topic and group). Bounded: per topic by the
topics the broker holds (a deleted topic's counters go with it); per (topic, group) by
MAX_GROUP_SERIES pairs, past which new pairs count under the group OTHER_GROUPS, so a client
inventing group names cannot grow the table or the /metrics page."""

from __future__ import annotations

import threading
from dataclasses import dataclass

MAX_GROUP_SERIES = 10_000
OTHER_GROUPS = "_other"


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


class BrokerStatsManager:
    def __init__(self, max_group_series: int = MAX_GROUP_SERIES) -> None:
        self._topics: dict[str, TopicCounters] = {}
        self._groups: dict[tuple[str, str], GroupCounters] = {}
        self._max_group_series = max_group_series
        self._lock = threading.Lock()

    def record_put(self, topic: str, messages: int, size: int) -> None:
        with self._lock:
            counters = self._topics.setdefault(topic, TopicCounters())
            counters.put_messages += messages
            counters.put_bytes += size

    def record_get(self, topic: str, messages: int, size: int, group: str = "") -> None:
        with self._lock:
            counters = self._topics.setdefault(topic, TopicCounters())
            counters.get_messages += messages
            counters.get_bytes += size
            by_group = self._group_counters(topic, group)
            by_group.get_messages += messages
            by_group.get_bytes += size

    def record_send_to_dlq(self, topic: str, group: str) -> None:
        """A message of `topic` moved to `group`'s dead-letter queue."""
        with self._lock:
            self._group_counters(topic, group).send_to_dlq += 1

    def _group_counters(self, topic: str, group: str) -> GroupCounters:
        key = (topic, group)
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
