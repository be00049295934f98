"""SubscriptionGroupManager (RocketMQ's): the per-group settings an admin stored (updateSubGroup):
whether the group may consume (`consume_enable`; false: its pulls are answered NO_PERMISSION, as
RocketMQ's PullMessageProcessor does) and how many times a message is retried before it goes to the
group's DLQ (`retry_max_times`). Kept in `<store>/config/subscriptionGroup.json`, written at once on
every change (an admin's rare act, atomically: json_file), at most `max_groups` groups. A slave's
table is the master's (`replace_all`, SlaveSynchronize), so a promoted slave enforces the same."""

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

    @classmethod
    def from_proto(cls, config: rmq_pb2.SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        return cls(config.consumer_group, config.consume_enable, config.retry_max_times)

    def to_proto(self) -> rmq_pb2.SubscriptionGroupConfig:
        return rmq_pb2.SubscriptionGroupConfig(consumer_group=self.group, consume_enable=self.consume_enable,
                                               retry_max_times=self.retry_max_times)


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

    def check_consume_enabled(self, group: str) -> None:
        """NO_PERMISSION when an admin disabled the group's consumption (RocketMQ's pull and pop
        processors answer a disabled group so, before reading anything)."""
        config = self._configs.get(group)
        if config is not None and not config.consume_enable:
            raise BrokerError(rmq_pb2.NO_PERMISSION, f"subscription group no permission, {group} "
                                                     "(an admin disabled its consumption)")

    def max_attempts(self, group: str, default: int) -> int:
        """How many times a pop delivers a message of the group before its DLQ: the stored
        retry_max_times + 1 (RocketMQ 5's proxy: the group's BackoffPolicy maxAttempts), else `default`."""
        config = self._configs.get(group)
        return default if config is None else config.retry_max_times + 1

    def update(self, config: SubscriptionGroupConfig) -> None:
        """Store (replace) the group's settings durably before answering."""
        config.check()
        with self._lock:
            if config.group not in self._configs and len(self._configs) >= self.max_groups:
                raise BrokerError(rmq_pb2.LIMIT_EXCEEDED, f"this broker already holds settings of "
                                                          f"{self.max_groups} groups")
            self._store({**self._configs, config.group: config})

    def delete(self, group: str) -> bool:
        """Forget the group's settings durably (RocketMQ deleteSubscriptionGroup); False when none
        were stored."""
        with self._lock:
            if group not in self._configs:
                return False
            self._store({name: config for name, config in self._configs.items() if name != group})
            return True

    def all(self) -> list[SubscriptionGroupConfig]:
        return list(self._configs.values())

    def replace_all(self, configs: list[SubscriptionGroupConfig]) -> bool:
        """Make the stored table `configs` (a slave takes its master's: groups the master dropped
        go too), in one atomic write, none when nothing changed; True when something did.
        ILLEGAL_ARGUMENT (nothing written) when one is out of range."""
        for config in configs:
            config.check()
        table = {config.group: config for config in configs}
        with self._lock:
            if table == self._configs:
                return False
            self._store(table)
            return True

    def _store(self, configs: dict[str, SubscriptionGroupConfig]) -> None:
        """Write `configs` (under the lock), then serve them."""
        write_json_atomically(self.path, {"subscriptionGroupTable": [
            asdict(stored) for _, stored in sorted(configs.items())]})
        self._configs = configs
