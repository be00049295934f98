"""Offsets of MessageQueues: what an OffsetStore answers when it has nothing (NO_OFFSET) or
cannot be read (OFFSET_READ_FAILED), and the JSON form `{"topic":{"brokerName":{"queueId":
nextOffset}}}` of offset files and of the Spark source's offsets (rmq.connector.spark.source_offsets)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rmq.connector.client import MessageQueue
from rmq.connector.errors import ConfigError

NO_OFFSET = -1         # OffsetStore.readOffset: nothing saved for the queue
OFFSET_READ_FAILED = -2  # OffsetStore.readOffset: the store could not be read

Positions = dict[MessageQueue, int]


def positions_to_json(positions: Mapping[MessageQueue, int]) -> dict[str, Any]:
    """Nested dict in MessageQueue order (Spark compares offsets as JSON text)."""
    result: dict[str, Any] = {}
    for mq in sorted(positions):
        result.setdefault(mq.topic, {}).setdefault(mq.broker_name, {})[str(mq.queue_id)] = positions[mq]
    return result


def positions_from_json(obj: Any, *, min_offset: int = 0) -> Positions:
    """Parse `{"topic":{"broker":{"queueId":offset}}}`; raises ValueError saying what is wrong."""
    if not isinstance(obj, dict):
        raise ConfigError('expected a JSON object {"topic":{"broker":{"queueId":offset}}}')
    positions: Positions = {}
    for topic, brokers in obj.items():
        if not isinstance(brokers, dict):
            raise ConfigError(f"topic {topic!r} must map to an object of brokers")
        for broker, queues in brokers.items():
            if not isinstance(queues, dict):
                raise ConfigError(f"broker {broker!r} of topic {topic!r} must map to an object of queue ids")
            for queue_id, offset in queues.items():
                if not (isinstance(queue_id, str) and queue_id.isdigit()):
                    raise ConfigError(f"queue id {queue_id!r} of {topic}/{broker} is not an integer >= 0")
                if isinstance(offset, bool) or not isinstance(offset, int) or offset < min_offset:
                    raise ConfigError(
                        f"offset {offset!r} of {topic}/{broker}/{queue_id} is not an integer >= {min_offset}"
                    )
                positions[MessageQueue(topic, broker, int(queue_id))] = offset
    return positions
