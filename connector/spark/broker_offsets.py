"""Driver-side view of a topic's queues: route lookup (the MessageQueues) and their min/max
offsets, plus the group's saved offsets through the OffsetStore. Implements
`source_offsets.QueueOffsetLookup` for policy resolution."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from rmq.connector.client import MessageQueue, QueueOffsets, RmqClient, RmqUnavailable
from rmq.connector.errors import OffsetResolutionError
from rmq.connector.offset_store import OffsetStore, ReadOffsetType

EMPTY_QUEUE = QueueOffsets(0, 0, 0)


class BrokerOffsetLookup:
    def __init__(self, client: RmqClient, store: OffsetStore | None) -> None:
        """`store` is None for a read without a consumer group (never asked for committed offsets)."""
        self._client = client
        self._store = store
        self._bounds: dict[MessageQueue, QueueOffsets] = {}

    def message_queues(self, topic: str) -> list[MessageQueue]:
        """The topic's readable queues, sorted (route lookup through the endpoints)."""
        return list(self._client.query_route(topic).message_queues)

    def refresh(self, topics: Iterable[str], unreachable: dict[str, RmqUnavailable] | None = None,
                brokers: Collection[str] | None = None) -> None:
        """Fetch the current min/max offsets of every queue of `topics` (on `brokers` only, when
        given: the others are not asked). With `unreachable`, a broker that cannot be reached is
        recorded there and its queues are left out (unknown), unless no broker answered at all
        (then RmqUnavailable, as without it)."""
        bounds: dict[MessageQueue, QueueOffsets] = {}
        for topic in topics:
            bounds.update(self._client.topic_offsets(topic, unreachable, brokers))
        if unreachable and not bounds:
            raise next(iter(unreachable.values()))
        self._bounds = bounds

    def known_queues(self) -> set[MessageQueue]:
        """Every queue of the topics of the last `refresh`."""
        return set(self._bounds)

    def min_offset(self, mq: MessageQueue) -> int:
        return self._bounds.get(mq, EMPTY_QUEUE).min_offset

    def max_offset(self, mq: MessageQueue) -> int:
        return self._bounds.get(mq, EMPTY_QUEUE).max_offset

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int:
        return self._client.search_offset(mq, timestamp_ms)

    def committed_offset(self, mq: MessageQueue) -> int:
        if self._store is None:
            raise OffsetResolutionError(f"no consumer group to read the committed offset of {mq} from")
        return self._store.read_offset(mq, ReadOffsetType.READ_FROM_STORE)
