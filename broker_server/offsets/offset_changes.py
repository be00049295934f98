"""The consumer offsets committed on a master since a point in time, for the transfer streams
that carry them to its slaves as they change (docs/replication.md)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from rmq.broker_server.offsets.consumer_offset_manager import OffsetKey
from rmq.v1 import rmq_pb2


def group_offset(key: OffsetKey, offset: int) -> rmq_pb2.GroupConsumerOffset:
    return rmq_pb2.GroupConsumerOffset(consumer_group=key.group, topic=key.topic, queue_id=key.queue_id,
                                       offset=offset)


class OffsetChanges:
    """The consumer offsets committed on this master, newest change last, each with its change
    number, so every transfer stream sends what changed since it last sent (any thread). At most
    `capacity` keys: the oldest change is forgotten beyond (SlaveSynchronize still carries it)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.count = 0   # changes so far
        self._changes: OrderedDict[OffsetKey, tuple[int, int]] = OrderedDict()   # key -> (offset, number)
        self._lock = threading.Lock()

    def committed(self, key: OffsetKey, offset: int) -> None:
        with self._lock:
            self.count += 1
            self._changes[key] = (offset, self.count)
            self._changes.move_to_end(key)
            if len(self._changes) > self.capacity:
                self._changes.popitem(last=False)

    def since(self, number: int) -> tuple[list[rmq_pb2.GroupConsumerOffset], int]:
        """The offsets changed after change `number`, oldest first, and the last change number."""
        with self._lock:
            changed = []
            for key, (offset, changed_at) in reversed(self._changes.items()):
                if changed_at <= number:
                    break
                changed.append(group_offset(key, offset))
            return changed[::-1], self.count
