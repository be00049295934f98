"""ConsumerConfig: what every consumer of the runtime is configured with (RocketMQ's
DefaultMQPushConsumer / DefaultLitePullConsumer fields shared by both; spec
consumer-pull-rebalance §4, §9), validated once, on enums instead of strings, and the
client-side constants of pulling (DefaultMQPushConsumerImpl's delays) defined once.

`ConsumerConfig.create(...)` takes the enums or their string values ("clustering", "avg",
"last") and raises ConfigError (a ValueError) naming the bad setting and what is accepted.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass

from rmq.connector.allocation import AllocateStrategy
from rmq.connector.errors import ConfigError
from rmq.connector.rebalance_service import WAIT_INTERVAL_S
from rmq.names import group_name_problem

PULL_TIME_DELAY_MILLS_WHEN_FLOW_CONTROL = 50
PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION = 3000
BROKER_SUSPEND_MAX_TIME_MILLIS = 15000
HALF_HOUR_MS = 30 * 60 * 1000
# LocalFileOffsetStore's directory (rocketmq.client.localOffsetStoreDir), as the Spark source's
# offsetStoreDir (README); LEGACY_OFFSET_STORE_DIR is where PushConsumers kept them before.
DEFAULT_OFFSET_STORE_DIR = "~/.rmq/offsets"
LEGACY_OFFSET_STORE_DIR = "~/.rmq_offsets"


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


def _choice(kind: type[enum.StrEnum], setting: str, value: str) -> enum.StrEnum:
    try:
        return kind(value)
    except ValueError:
        raise ConfigError(f"{setting} must be one of {', '.join(m.value for m in kind)}, "
                          f"not {value!r}") from None


@dataclass(frozen=True)
class ConsumerConfig:
    """The settings the runtime (ClientInstance, RebalanceImpl) reads of one consumer."""

    group: str
    message_model: MessageModel = MessageModel.CLUSTERING
    allocate_strategy: AllocateStrategy = AllocateStrategy.AVG
    consume_from: ConsumeFromWhere = ConsumeFromWhere.LAST
    consume_timestamp_ms: int = 0          # CONSUME_FROM_TIMESTAMP's start (create(): half an hour ago)
    pull_batch_size: int = 32
    pull_threshold_for_queue: int = 1000
    rebalance_interval_s: float = WAIT_INTERVAL_S
    instance_name: str | None = None       # the client id's instance part (None: the process id)

    def __post_init__(self) -> None:
        check_group(self.group)
        for name in ("pull_batch_size", "pull_threshold_for_queue", "rebalance_interval_s"):
            value = getattr(self, name)
            if value <= 0:
                raise ConfigError(f"{name} must be positive, not {value}")

    @classmethod
    def create(cls, group: str, *, message_model: MessageModel | str = MessageModel.CLUSTERING,
               allocate_strategy: AllocateStrategy | str = AllocateStrategy.AVG,
               consume_from: ConsumeFromWhere | str = ConsumeFromWhere.LAST,
               consume_timestamp: int | None = None, pull_batch_size: int = 32,
               pull_threshold_for_queue: int = 1000, rebalance_interval_s: float = WAIT_INTERVAL_S,
               instance_name: str | None = None) -> ConsumerConfig:
        """From the consumers' keyword arguments (enums or their values)."""
        check_group(group)
        return cls(
            group,
            MessageModel(_choice(MessageModel, "message_model", message_model)),
            AllocateStrategy(_choice(AllocateStrategy, "allocate_strategy", allocate_strategy)),
            ConsumeFromWhere(_choice(ConsumeFromWhere, "consume_from", consume_from)),
            consume_timestamp if consume_timestamp is not None else int(time.time() * 1000) - HALF_HOUR_MS,
            pull_batch_size, pull_threshold_for_queue, rebalance_interval_s, instance_name)

    @property
    def broadcasting(self) -> bool:
        return self.message_model is MessageModel.BROADCASTING
