"""ConsumerConfig: the one carrier of a consumer's settings (RocketMQ's DefaultMQPushConsumer /
DefaultLitePullConsumer fields; spec consumer-pull-rebalance §4, §9), read by PushConsumer,
PullConsumer and the pull loop they share (ConsumerImpl), validated once, on enums instead of
strings, and the client-side constants of pulling (DefaultMQPushConsumerImpl's delays) defined once.

The consumers' keyword arguments are `PushConsumerSettings` / `PullConsumerSettings` (the public
contract, docs/manual/sdk.md); `ConsumerConfig.create(group, settings, accepted)` turns them into a
ConsumerConfig: the enums or their string values ("clustering", "avg", "last", "auto"), numbers
checked for type and range, and a ConfigError (a ValueError) naming the bad or unknown keyword
and what is accepted.
"""

from __future__ import annotations

import enum
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, cast, get_type_hints

from rmq.connector.allocation import AllocateStrategy
from rmq.connector.errors import ConfigError
from rmq.connector.offset_store import DEFAULT_OFFSET_STORE_DIR
from rmq.connector.process_queue import REBALANCE_LOCK_INTERVAL_S
from rmq.connector.rebalance_service import WAIT_INTERVAL_S
from rmq.connector.transport import Transport
from rmq.names import group_name_problem

PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL = 50
PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION = 3000
BROKER_SUSPEND_MAX_TIME_MILLIS = 15000
HALF_HOUR_MS = 30 * 60 * 1000
# where PushConsumers kept their local offsets before DEFAULT_OFFSET_STORE_DIR (rmq.connector.offset_store)
LEGACY_OFFSET_STORE_DIR = "~/.rmq_offsets"
PERSIST_CONSUMER_OFFSET_INTERVAL_S = 5.0   # persistConsumerOffsetInterval
AUTO_COMMIT_INTERVAL_S = 5.0               # autoCommitIntervalMillis
PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB = 100    # pullThresholdSizeForQueue


class MessageModel(enum.StrEnum):
    """CLUSTERING: the group's members split the queues and share broker-side offsets;
    BROADCASTING: every member reads every queue and keeps its own offsets in a local file."""

    CLUSTERING = "clustering"
    BROADCASTING = "broadcasting"


class ServiceState(enum.StrEnum):
    """RocketMQ's ServiceState: where a consumer is in its life (start() once, shutdown() once)."""

    CREATE_JUST = "CREATE_JUST"
    RUNNING = "RUNNING"
    START_FAILED = "START_FAILED"
    SHUTDOWN_ALREADY = "SHUTDOWN_ALREADY"


class ConsumeFromWhere(enum.StrEnum):
    """Where a queue the group never committed starts (spec pull §9)."""

    LAST = "last"            # CONSUME_FROM_LAST_OFFSET: the queue's max offset
    FIRST = "first"          # CONSUME_FROM_FIRST_OFFSET: offset 0
    TIMESTAMP = "timestamp"  # CONSUME_FROM_TIMESTAMP: the first message stored at/after consume_timestamp


def check_group(group: str) -> None:
    """checkConfig: the group name follows RocketMQ's rules (ConfigError naming what is wrong)."""
    problem = group_name_problem(group)
    if problem is not None:
        raise ConfigError(problem)


class _SharedSettings(TypedDict, total=False):
    """The keywords both consumers take (beside group, endpoints and client)."""

    allocate_strategy: AllocateStrategy | str
    consume_from: ConsumeFromWhere | str
    consume_timestamp: int | None   # CONSUME_FROM_TIMESTAMP's start in epoch ms (None: half an hour ago)
    pull_batch_size: int
    pull_threshold_for_queue: int
    rebalance_interval_s: float
    instance_name: str | None


class PushConsumerSettings(_SharedSettings, total=False):
    """PushConsumer's keywords (DefaultMQPushConsumer's fields)."""

    message_model: MessageModel | str
    max_reconsume_times: int | None
    consume_thread_max: int
    consume_message_batch_max_size: int
    pull_threshold_size_for_queue: int
    consume_concurrently_max_span: int
    pull_interval_ms: int
    suspend_current_queue_time_millis: int
    consume_timeout_minutes: float
    await_termination_s: float
    lock_interval_s: float
    persist_consumer_offset_interval_s: float
    offset_store_dir: str | os.PathLike[str]


class PullConsumerSettings(_SharedSettings, total=False):
    """PullConsumer's keywords (DefaultLitePullConsumer's fields)."""

    auto_commit: bool
    auto_commit_interval_s: float
    transport: Transport | str


# every key of a settings TypedDict is optional (total=False)
_KEYWORDS: dict[type, frozenset[str]] = {kind: frozenset(get_type_hints(kind))
                                         for kind in (PushConsumerSettings, PullConsumerSettings)}
_CHOICES: dict[str, type[enum.Enum]] = {"message_model": MessageModel, "allocate_strategy": AllocateStrategy,
                                        "consume_from": ConsumeFromWhere, "transport": Transport}
_POSITIVE = ("pull_batch_size", "pull_threshold_for_queue", "pull_threshold_size_for_queue",
             "consume_concurrently_max_span", "rebalance_interval_s", "consume_thread_max",
             "consume_message_batch_max_size", "consume_timeout_minutes", "lock_interval_s",
             "persist_consumer_offset_interval_s", "auto_commit_interval_s")
_NOT_NEGATIVE = ("max_reconsume_times", "pull_interval_ms", "suspend_current_queue_time_millis",
                 "await_termination_s")


def _choice(kind: type[enum.Enum], setting: str, value: object) -> enum.Enum:
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(f"{setting} must be one of {', '.join(str(m.value) for m in kind)}, "
                          f"not {value!r}") from None


def _check_number(name: str, value: object, minimum: str) -> None:
    """`value` is an int or float (not a bool) above 0 ("positive") or at least 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number, not {value!r}")
    if value < 0 or (minimum == "positive" and value == 0):
        raise ConfigError(f"{name} must be {minimum}, not {value}")


@dataclass(frozen=True)
class ConsumerConfig:
    """The settings of one consumer, as the consumers, their pull loop (ConsumerImpl) and the
    runtime (ClientInstance, RebalanceImpl, the consume services) read them, with RocketMQ's
    defaults; a PullConsumer's has no span bound (DefaultLitePullConsumer has none)."""

    group: str
    message_model: MessageModel = MessageModel.CLUSTERING
    allocate_strategy: AllocateStrategy = AllocateStrategy.AVG
    consume_from: ConsumeFromWhere = ConsumeFromWhere.LAST
    consume_timestamp_ms: int = 0          # CONSUME_FROM_TIMESTAMP's start (create(): half an hour ago)
    pull_batch_size: int = 32
    pull_threshold_for_queue: int = 1000
    pull_threshold_size_for_queue: int = PULL_THRESHOLD_SIZE_FOR_QUEUE_MIB   # MiB
    consume_concurrently_max_span: int | None = 2000   # None: the span is not bounded
    pull_interval_ms: int = 0
    rebalance_interval_s: float = WAIT_INTERVAL_S
    instance_name: str | None = None       # the client id's instance part (None: the process id)
    # PushConsumer only
    max_reconsume_times: int | None = None   # None: 16 for concurrent listeners, unlimited for orderly ones
    consume_thread_max: int = 20
    consume_message_batch_max_size: int = 1
    suspend_current_queue_time_millis: int = 1000
    consume_timeout_minutes: float = 15
    await_termination_s: float = 30.0
    lock_interval_s: float = REBALANCE_LOCK_INTERVAL_S
    persist_consumer_offset_interval_s: float = PERSIST_CONSUMER_OFFSET_INTERVAL_S
    offset_store_dir: Path = field(default_factory=lambda: Path(DEFAULT_OFFSET_STORE_DIR).expanduser())
    # PullConsumer only
    auto_commit: bool = True
    auto_commit_interval_s: float = AUTO_COMMIT_INTERVAL_S
    transport: Transport = Transport.AUTO

    def __post_init__(self) -> None:
        check_group(self.group)
        for name in _POSITIVE + _NOT_NEGATIVE:
            value = getattr(self, name)
            if value is not None:
                _check_number(name, value, "positive" if name in _POSITIVE else "at least 0")

    @classmethod
    def create(cls, group: str, settings: Mapping[str, object],
               accepted: type[PushConsumerSettings] | type[PullConsumerSettings]) -> ConsumerConfig:
        """From a consumer's keyword arguments (`accepted` names them): enums or their values,
        `consume_timestamp` (None: half an hour ago), `offset_store_dir` with `~` expanded. A
        keyword `accepted` does not name is a ConfigError naming it."""
        names = _KEYWORDS[accepted]
        unknown = sorted(set(settings) - names)
        if unknown:
            raise ConfigError(f"unknown setting {unknown[0]!r}; accepted: {', '.join(sorted(names))}")
        values = dict(settings)
        for name, kind in _CHOICES.items():
            if name in values:
                values[name] = _choice(kind, name, values[name])
        timestamp = values.pop("consume_timestamp", None)
        values["consume_timestamp_ms"] = (int(time.time() * 1000) - HALF_HOUR_MS if timestamp is None
                                          else timestamp)
        if "offset_store_dir" in values:
            directory = cast("str | os.PathLike[str]", values["offset_store_dir"])
            values["offset_store_dir"] = Path(directory).expanduser()
        if accepted is PullConsumerSettings:   # lite pull: no span bound
            values["consume_concurrently_max_span"] = None
        return cls(group, **cast(dict[str, Any], values))

    @property
    def broadcasting(self) -> bool:
        return self.message_model is MessageModel.BROADCASTING

