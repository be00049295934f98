"""SubscriptionGroupManager (RocketMQ's): the per-group settings an admin stored (updateSubGroup):
whether the group may consume (`consume_enable`; false: its pulls are answered NO_PERMISSION, as
RocketMQ's PullMessageProcessor does) and how many times a message is retried before it goes to the
group's DLQ (`retry_max_times`). Kept in `<store>/config/subscriptionGroup.json`, written at once on
every change (an admin's rare act, atomically: json_file), at most `max_groups` groups."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from rmq import retry
from rmq.broker_server.errors import BrokerError, illegal_argument
from rmq.broker_server.json_file import read_json, write_json_atomically
from rmq.v1 import rmq_pb2

FILE = "subscriptionGroup.json"
MAX_RETRY_MAX_TIMES = 1000


@dataclass(frozen=True)
class SubscriptionGroupConfig:
    group: str
    consume_enable: bool = True
    retry_max_times: int = retry.DEFAULT_MAX_RECONSUME_TIMES

    def check(self) -> None:
        """ILLEGAL_ARGUMENT naming a setting out of range."""
        if not 0 <= self.retry_max_times <= MAX_RETRY_MAX_TIMES:
            raise illegal_argument(
                f"retry_max_times must be 0-{MAX_RETRY_MAX_TIMES}, not {self.retry_max_times}")


class SubscriptionGroupManager:
    def __init__(self, store_path: Path, max_groups: int) -> None:
        self.path = store_path / "config" / FILE
        self.max_groups = max_groups
        self._configs: dict[str, SubscriptionGroupConfig] = {}
        self._lock = threading.Lock()

    def load(self) -> None:
        content = read_json(self.path) or {}
        try:
            entries = content.get("subscriptionGroupTable", [])
            configs = [SubscriptionGroupConfig(**entry) for entry in entries]
        except (AttributeError, TypeError) as error:
            raise ValueError(f"{self.path} has an unexpected layout: {error}") from error
        self._configs = {config.group: config for config in configs}

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's stored settings, None when an admin never set them (RocketMQ's defaults apply)."""
        return self._configs.get(group)

    def update(self, config: SubscriptionGroupConfig) -> None:
        """Store (replace) the group's settings durably before answering."""
        config.check()
        with self._lock:
            if config.group not in self._configs and len(self._configs) >= self.max_groups:
                raise BrokerError(rmq_pb2.LIMIT_EXCEEDED, f"this broker already holds settings of "
                                                          f"{self.max_groups} groups")
            configs = {**self._configs, config.group: config}
            write_json_atomically(self.path, {"subscriptionGroupTable": [
                asdict(stored) for _, stored in sorted(configs.items())]})
            self._configs = configs
