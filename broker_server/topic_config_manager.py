"""The broker's topics (RocketMQ TopicConfigManager): name, read/write queue counts and
permission, persisted to `<store>/config/topics.json`."""

from __future__ import annotations

import threading
from dataclasses import asdict
from pathlib import Path

from rmq.broker_server.json_file import read_json, write_json_atomically
from rmq.broker_server.names import check_topic_name, check_user_topic_name
from rmq.broker_server.status import RequestError, illegal_argument, rmq_pb2
from rmq.topic_config import PERM_INHERIT, PERM_READ, PERM_WRITE, TopicConfig

MAX_QUEUE_NUMS = 1024


def check_topic_config(config: TopicConfig) -> None:
    """Refuse a config no topic may have: bad name (TOPIC_ILLEGAL), queue counts outside
    1..1024 or a permission without read or write (ILLEGAL_ARGUMENT)."""
    check_user_topic_name(config.topic_name)
    for name in ("read_queue_nums", "write_queue_nums"):
        value = getattr(config, name)
        if not 1 <= value <= MAX_QUEUE_NUMS:
            raise illegal_argument(f"{name} must be between 1 and {MAX_QUEUE_NUMS}, not {value}")
    if config.perm & ~(PERM_READ | PERM_WRITE | PERM_INHERIT) or not config.perm & (PERM_READ | PERM_WRITE):
        raise illegal_argument(
            f"perm must combine PERM_READ ({PERM_READ}) and/or PERM_WRITE ({PERM_WRITE}), not {config.perm}"
        )


class TopicConfigManager:
    def __init__(self, store_path: Path, auto_create: bool = False, default_queue_nums: int = 8) -> None:
        self.path = store_path / "config" / "topics.json"
        self.auto_create = auto_create
        self.default_queue_nums = default_queue_nums
        self._topics: dict[str, TopicConfig] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        content = read_json(self.path) or {}
        try:
            self._topics = {
                name: TopicConfig(**fields) for name, fields in content.get("topicConfigTable", {}).items()
            }
        except TypeError as error:
            raise ValueError(f"{self.path} has an unexpected layout: {error}") from error

    def persist(self) -> None:
        with self._lock:
            table = {name: asdict(config) for name, config in self._topics.items()}
        write_json_atomically(self.path, {"topicConfigTable": table})

    def create(self, config: TopicConfig) -> None:
        check_topic_config(config)
        with self._lock:
            existing = self._topics.get(config.topic_name)
            if existing is not None:
                raise RequestError(
                    rmq_pb2.TOPIC_ALREADY_EXISTS,
                    f"topic {config.topic_name!r} already exists with {existing.read_queue_nums} read / "
                    f"{existing.write_queue_nums} write queues",
                )
            self._topics[config.topic_name] = config
        self.persist()

    def update(self, config: TopicConfig) -> None:
        """Grow an existing topic's queue counts and/or change its perm (RocketMQ updateTopic).
        A smaller queue count is refused (ILLEGAL_ARGUMENT): its queues may hold messages."""
        check_topic_config(config)
        with self._lock:
            existing = self._topics.get(config.topic_name)
            if existing is None:
                raise self._not_exist(config.topic_name)
            for name in ("read_queue_nums", "write_queue_nums"):
                before, after = getattr(existing, name), getattr(config, name)
                if after < before:
                    raise illegal_argument(
                        f"topic {config.topic_name!r} cannot shrink from {before} to {after} {name}: "
                        f"queues holding messages cannot be removed"
                    )
            self._topics[config.topic_name] = config
        self.persist()

    def delete(self, topic: str) -> TopicConfig:
        with self._lock:
            config = self._topics.pop(topic, None)
        if config is None:
            raise self._not_exist(topic)
        self.persist()
        return config

    def get(self, topic: str) -> TopicConfig | None:
        return self._topics.get(topic)

    def require(self, topic: str) -> TopicConfig:
        """The topic's config; an unknown topic is refused (TOPIC_NOT_EXIST), or created with
        the default queue count when auto-creation is on (autoCreateTopicEnable)."""
        config = self._topics.get(topic)
        if config is not None:
            return config
        check_topic_name(topic)
        if not self.auto_create:
            raise self._not_exist(topic)
        config = TopicConfig(topic, self.default_queue_nums, self.default_queue_nums)
        try:
            self.create(config)
        except RequestError as error:
            if error.code != rmq_pb2.TOPIC_ALREADY_EXISTS:
                raise
        return self._topics[topic]

    def create_in_send_message_back(self, topic: str, queue_nums: int, perm: int) -> TopicConfig:
        """The retry or dead-letter topic of a group, created with `queue_nums` queues and
        `perm` on first use (createTopicInSendMessageBackMethod); an existing one is kept."""
        check_topic_name(topic)
        with self._lock:
            config = self._topics.get(topic)
            if config is not None:
                return config
            config = self._topics[topic] = TopicConfig(topic, queue_nums, queue_nums, perm)
        self.persist()
        return config

    def all(self) -> list[TopicConfig]:
        return sorted(self._topics.values(), key=lambda config: config.topic_name)

    @staticmethod
    def _not_exist(topic: str) -> RequestError:
        return RequestError(rmq_pb2.TOPIC_NOT_EXIST, f"topic {topic!r} does not exist on this broker")
