"""Checking the offsets and timestamps that startingOffsets / endingOffsets (and their
ByTimestamp forms) name against the queues the topics really have, once the routes are known
(at the first micro-batch of a stream, when a batch read is planned): a queue or broker
that does not exist, or a start offset beyond a queue's end, fails the query with a message
naming the option, where otherwise it would go unnoticed or look like lost messages (an end
beyond a queue's end likewise, for batch reads)."""

from __future__ import annotations

from collections.abc import Collection

from rmq.connector.errors import RmqOptionError
from rmq.connector.spark.source_offsets import (
    Committed,
    OffsetPolicy,
    QueueOffsetLookup,
    Specific,
    Timestamps,
    resolve_offset,
)
from rmq.message_queue import MessageQueue


def _named(policy: OffsetPolicy | None, starting: bool) -> list[tuple[str, MessageQueue]]:
    """(option, queue) for every queue the policy names explicitly, through its fallbacks."""
    prefix = "startingOffsets" if starting else "endingOffsets"
    match policy:
        case Specific(positions=positions, fallback=fallback):
            return [(prefix, mq) for mq in positions] + _named(fallback, starting)
        case Timestamps(timestamps=timestamps, fallback=fallback):
            return [(prefix + "ByTimestamp", mq) for mq in timestamps] + _named(fallback, starting)
        case Committed(fallback=fallback):
            return _named(fallback, starting)
    return []


def check_named_queues(policy: OffsetPolicy, known: Collection[MessageQueue], *, starting: bool) -> None:
    """Refuse queues named by the policy that none of the topics' brokers has."""
    missing: dict[str, list[MessageQueue]] = {}
    for option, mq in _named(policy, starting):
        if mq not in known:
            missing.setdefault(option, []).append(mq)
    for option, queues in missing.items():
        topics = sorted({mq.topic for mq in queues})
        existing = [str(mq) for mq in sorted(known) if mq.topic in topics]
        raise RmqOptionError(
            f"Option {option!r} names queues that do not exist: {', '.join(map(str, sorted(queues)))} "
            f"(topic:broker:queue; the topics have {', '.join(existing) or 'no queue'})"
        )


def resolve_start(policy: OffsetPolicy, mq: MessageQueue, lookup: QueueOffsetLookup) -> int:
    """The start offset of `mq`; an explicit offset beyond the queue's end is refused (an
    offset below its start is data loss, handled by failOnDataLoss when read)."""
    return _within_queue("startingOffsets", policy, mq, lookup)


def resolve_end(policy: OffsetPolicy, mq: MessageQueue, lookup: QueueOffsetLookup) -> int:
    """The end offset of `mq` for a batch read; beyond the queue's end is refused when the read
    is planned (it would otherwise be read as lost messages)."""
    return _within_queue("endingOffsets", policy, mq, lookup)


def _within_queue(option: str, policy: OffsetPolicy, mq: MessageQueue, lookup: QueueOffsetLookup) -> int:
    offset = resolve_offset(policy, mq, lookup)
    end = lookup.max_offset(mq)
    if offset > end:
        raise RmqOptionError(
            f"Option {option!r} gives offset {offset} for topic {mq.topic} broker {mq.broker_name} "
            f"queue {mq.queue_id}, which is beyond the queue's end: its messages end at offset {end} "
            f"(use -1 for latest, -2 for earliest)"
        )
    return offset
