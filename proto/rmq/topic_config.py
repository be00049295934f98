"""A topic's queue counts and permission (RocketMQ TopicConfig and PermName), as the broker
keeps them and the admin calls carry them."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from rmq.v1 import rmq_pb2

PERM_READ = 4      # RocketMQ PermName
PERM_WRITE = 2
PERM_INHERIT = 1
PERM_READ_WRITE = PERM_READ | PERM_WRITE


@dataclass(frozen=True)
class TopicConfig:
    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = PERM_READ_WRITE

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writeable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    def to_proto(self) -> rmq_pb2.TopicConfig:
        return rmq_pb2.TopicConfig(**asdict(self))

    @classmethod
    def from_proto(cls, config: rmq_pb2.TopicConfig) -> TopicConfig:
        return cls(config.topic_name, config.read_queue_nums, config.write_queue_nums, config.perm)


@dataclass(frozen=True)
class QueueData:
    """The queues one broker holds for a topic (RocketMQ QueueData): what routes carry, on every
    protocol."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
