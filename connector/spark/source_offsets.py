"""Offsets of the Spark source: the stream offset Spark checkpoints (StreamOffset: the query's
client id, group and next offset per owned queue) and the start/end policies (`earliest`,
`latest`, `committed`, `timestamp:<ms>`, JSON with -2/-1).

Resolving a policy for one MessageQueue follows computePullFromWhere (spec
consumer-pull-rebalance §9, TV-9): a saved (committed) offset wins when the policy asks for
it, otherwise the queue head, tail or the offset found by timestamp.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, assert_never

from rmq.connector.errors import ConfigError, OffsetResolutionError
from rmq.connector.offsets import (
    OFFSET_READ_FAILED,
    Positions,
    positions_from_json,
    positions_to_json,
)
from rmq.message_queue import MessageQueue

OFFSET_EARLIEST = -2   # in offset JSON: the queue's min offset
OFFSET_LATEST = -1     # in offset JSON: the queue's max offset

# Keys of the stream offset that carry the query's consumer client id and consumer group,
# so a restarted driver keeps its identity and its group. "@" cannot occur in a topic name.
CLIENT_ID_KEY = "@clientId"
GROUP_KEY = "@group"
# Marks a stream's initial offset: the query's identity only. Its queues and their start
# offsets are chosen when the first micro-batch is planned, and that batch's end offset
# carries them under FROM_KEY: Spark's offset log then holds the query's identity and start
# offsets before anything is read, and a restart that re-asks the initial offset (batch 0
# not committed) replays batch 0 from the recorded start, not from a re-resolved one.
INITIAL_KEY = "@initial"
FROM_KEY = "@from"


@dataclass(frozen=True)
class StreamOffset:
    """One offset of the streaming source: the next offset to read per owned queue.

    `group` is None only in offsets checkpointed before GROUP_KEY existed; `initial` marks
    the offset a query starts from (no positions yet); `start`, only in the end offset of a
    query's first micro-batch, is where that batch starts (startingOffsets resolved)."""

    client_id: str
    group: str | None
    positions: Positions
    initial: bool = False
    start: Positions | None = field(default=None, hash=False)

    def to_json(self) -> dict[str, Any]:
        keys: dict[str, Any] = {CLIENT_ID_KEY: self.client_id}
        keys |= {GROUP_KEY: self.group} if self.group else {}
        if self.initial:
            keys[INITIAL_KEY] = True
        if self.start is not None:
            keys[FROM_KEY] = positions_to_json(self.start)
        return keys | positions_to_json(self.positions)

    @classmethod
    def from_json(cls, obj: Any) -> StreamOffset:
        if not isinstance(obj, dict) or not isinstance(obj.get(CLIENT_ID_KEY), str):
            raise ConfigError(f"not an rmq stream offset (no {CLIENT_ID_KEY!r}): {obj!r}")
        group = obj.get(GROUP_KEY)
        if group is not None and not isinstance(group, str):
            raise ConfigError(f"{GROUP_KEY!r} of an rmq stream offset is not a string: {obj!r}")
        rest = {key: value for key, value in obj.items() if not key.startswith("@")}
        start = obj.get(FROM_KEY)
        return cls(obj[CLIENT_ID_KEY], group, positions_from_json(rest), obj.get(INITIAL_KEY) is True,
                   None if start is None else positions_from_json(start))

    def batch_start(self, end: StreamOffset) -> Positions:
        """Where the micro-batch from this offset to `end` starts reading: this offset's positions,
        or for a query's first batch (this offset is the initial one) the start `end` recorded.
        A first batch planned before FROM_KEY existed read nothing (no positions)."""
        if self.initial and end.start is not None:
            return end.start
        return self.positions


# ---------------------------------------------------------------- policies


@dataclass(frozen=True)
class Earliest:
    def __str__(self) -> str:
        return "earliest"


@dataclass(frozen=True)
class Latest:
    def __str__(self) -> str:
        return "latest"


@dataclass(frozen=True)
class Committed:
    """The group's saved offset (broker in clustering, local file in broadcasting); a queue
    with none starts at `fallback` (RocketMQ's consumeFromWhere), or fails when it is None."""

    fallback: OffsetPolicy | None = field(default_factory=lambda: Latest())

    def __str__(self) -> str:
        return "committed"


@dataclass(frozen=True)
class AtTimestamp:
    """The first message stored at or after `timestamp_ms` (max offset when all are older;
    `strict`: an OffsetResolutionError then, startingOffsetsByTimestampStrategy=error)."""

    timestamp_ms: int
    strict: bool = False

    def __str__(self) -> str:
        return f"timestamp:{self.timestamp_ms}"


@dataclass(frozen=True)
class Specific:
    """Explicit offsets per queue (-2 earliest, -1 latest); queues not listed use `fallback`."""

    positions: Positions = field(hash=False)
    fallback: OffsetPolicy = field(default_factory=Latest)

    def __str__(self) -> str:
        return "JSON offsets"


@dataclass(frozen=True)
class Timestamps:
    """Per queue, the first message stored at or after its epoch-ms timestamp; queues not
    listed use `fallback`."""

    timestamps: Positions = field(hash=False)
    fallback: OffsetPolicy = field(default_factory=Latest)
    strict: bool = False   # as AtTimestamp's

    def __str__(self) -> str:
        return "JSON timestamps"


OffsetPolicy = Earliest | Latest | Committed | AtTimestamp | Specific | Timestamps


class QueueOffsetLookup(Protocol):
    """What resolving a policy needs from the broker and the OffsetStore."""

    def min_offset(self, mq: MessageQueue) -> int: ...

    def max_offset(self, mq: MessageQueue) -> int: ...

    def search_offset(self, mq: MessageQueue, timestamp_ms: int) -> int: ...

    def committed_offset(self, mq: MessageQueue) -> int:
        """The saved offset, NO_OFFSET when none, OFFSET_READ_FAILED when unreadable."""
        ...


def resolve_offset(policy: OffsetPolicy, mq: MessageQueue, lookup: QueueOffsetLookup) -> int:
    """The offset `policy` designates for `mq`."""
    match policy:
        case Earliest():
            return lookup.min_offset(mq)
        case Latest():
            return lookup.max_offset(mq)
        case Committed(fallback=fallback):
            saved = lookup.committed_offset(mq)
            if saved == OFFSET_READ_FAILED:
                raise OffsetResolutionError(f"could not read the committed offset of {_describe(mq)}")
            if saved >= 0:
                return saved
            if fallback is None:
                raise OffsetResolutionError(
                    f"the group has no committed offset for {_describe(mq)} (committedFallback=error)")
            return resolve_offset(fallback, mq, lookup)
        case AtTimestamp(timestamp_ms=timestamp_ms, strict=strict):
            return _at_timestamp(mq, lookup, timestamp_ms, strict)
        case Specific(positions=positions, fallback=fallback):
            offset = positions.get(mq)
            if offset is None:
                return resolve_offset(fallback, mq, lookup)
            if offset == OFFSET_EARLIEST:
                return lookup.min_offset(mq)
            if offset == OFFSET_LATEST:
                return lookup.max_offset(mq)
            return offset
        case Timestamps(timestamps=timestamps, fallback=fallback, strict=strict):
            stamp = timestamps.get(mq)
            return resolve_offset(fallback, mq, lookup) if stamp is None else _at_timestamp(mq, lookup, stamp,
                                                                                            strict)
    assert_never(policy)


def _at_timestamp(mq: MessageQueue, lookup: QueueOffsetLookup, timestamp_ms: int, strict: bool) -> int:
    """The first offset stored at or after `timestamp_ms`: the queue's end when every message is older,
    or (strict) an OffsetResolutionError, as Kafka's startingOffsetsByTimestampStrategy=error."""
    offset = lookup.search_offset(mq, timestamp_ms)
    if strict and offset >= lookup.max_offset(mq):
        raise OffsetResolutionError(
            f"no message of {_describe(mq)} was stored at or after timestamp {timestamp_ms} "
            "(startingOffsetsByTimestampStrategy=error; latest starts such a queue at its end)")
    return offset


def resolve_acquired_offset(mq: MessageQueue, lookup: QueueOffsetLookup) -> int:
    """Start offset of a queue a running query newly owns (a rebalance handed it over, or
    the topic grew): the group's committed offset, else the queue's earliest offset, as
    CONSUME_FROM_FIRST_OFFSET (spec consumer-pull-rebalance §9, TV-9). startingOffsets
    applies when the query starts only (as in Kafka's source, where partitions found later
    start at earliest): a queue created after that holds only messages written since, and
    none of them may be lost. Returns OFFSET_READ_FAILED when the committed offset cannot
    be read: the queue is skipped this round and tried again at the next rebalance."""
    saved = lookup.committed_offset(mq)
    if saved >= 0 or saved == OFFSET_READ_FAILED:
        return saved
    return lookup.min_offset(mq)


def _describe(mq: MessageQueue) -> str:
    return f"topic {mq.topic} broker {mq.broker_name} queue {mq.queue_id}"
