"""Per-topic put and get counters (RocketMQ BrokerStatsManager: TOPIC_PUT_NUMS / TOPIC_PUT_SIZE /
GROUP_GET_NUMS / GROUP_GET_SIZE, kept per topic here). Bounded by the topics the broker holds: a
deleted topic's counters go with it."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass
class TopicCounters:
    put_messages: int = 0
    put_bytes: int = 0
    get_messages: int = 0
    get_bytes: int = 0


class BrokerStatsManager:
    def __init__(self) -> None:
        self._topics: dict[str, TopicCounters] = {}
        self._lock = threading.Lock()

    def record_put(self, topic: str, messages: int, size: int) -> None:
        with self._lock:
            counters = self._topics.setdefault(topic, TopicCounters())
            counters.put_messages += messages
            counters.put_bytes += size

    def record_get(self, topic: str, messages: int, size: int) -> None:
        with self._lock:
            counters = self._topics.setdefault(topic, TopicCounters())
            counters.get_messages += messages
            counters.get_bytes += size

    def remove_topic(self, topic: str) -> None:
        with self._lock:
            self._topics.pop(topic, None)

    def snapshot(self) -> dict[str, TopicCounters]:
        with self._lock:
            return {topic: TopicCounters(**vars(counters)) for topic, counters in self._topics.items()}
