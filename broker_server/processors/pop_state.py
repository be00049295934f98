"""Pop consumption state (RocketMQ 5 pop: PopMessageProcessor / AckMessageProcessor /
ChangeInvisibleTimeProcessor; spec rocketmq-v2-protocol.md §4), kept per consumer group and
queue, durable across restarts (kill -9 included).

For one (group, topic, queue): `pop_offset` is the first queue offset never handed out, and
`inflight` the offsets handed out and not yet acknowledged, each with its delivery attempts,
the time it becomes receivable again and the generation of its receipt handle. Everything
below `pop_offset` that is not in flight is done (acknowledged, or skipped by the group's
filter), so the group's consumer offset is the smallest in-flight offset, else `pop_offset`.
Instead of RocketMQ's CK/ACK records in a revive topic, a message whose invisibility ends is
redelivered from the same queue by the next receive.

Every change is a line in `<store>/config/popState.journal` (rmq.broker_server.journal), written
and fsynced before the broker answers, so an acknowledged message is never redelivered after a
crash; replaying the journal rebuilds the state."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmq.broker_server.journal import Journal
from rmq.broker_server.processors.store_executor import StoreExecutor

COMPACT_AFTER_LINES = 100_000


@dataclass(frozen=True, order=True)
class PopQueue:
    group: str
    topic: str
    queue_id: int


@dataclass
class InFlight:
    attempts: int        # deliveries so far (the last one's delivery_attempt)
    visible_at_ms: int   # receivable again from then on, unless acknowledged
    version: int         # receipt handle generation: a change of invisibility makes a new one


@dataclass
class QueuePopState:
    pop_offset: int = 0
    inflight: dict[int, InFlight] = field(default_factory=dict)

    def consumer_offset(self) -> int:
        return min(self.inflight, default=self.pop_offset)


class PopStateTable:
    def __init__(self, store_path: Path, executor: StoreExecutor) -> None:
        self.queues: dict[PopQueue, QueuePopState] = {}
        self._journal = Journal(store_path / "config" / "popState.journal", executor, self._snapshot,
                                COMPACT_AFTER_LINES)

    # -- loading -------------------------------------------------------------------------
    def load(self) -> None:
        """Replay the journal (a torn last line, from a crash mid-write, is ignored)."""
        self._journal.replay(self._apply)

    def _apply(self, entry: dict[str, Any]) -> None:
        queue = PopQueue(entry["g"], entry["t"], entry["q"])
        kind = entry["op"]
        state = self.queues.setdefault(queue, QueuePopState())
        if kind == "pop":
            state.pop_offset = max(state.pop_offset, entry["next"])
            for offset, attempts, visible_at, version in entry["m"]:
                state.inflight[offset] = InFlight(attempts, visible_at, version)
        elif kind == "ack":
            for offset in entry["o"]:
                state.inflight.pop(offset, None)
        elif kind == "state":
            state.pop_offset = entry["next"]
            state.inflight = {o: InFlight(a, v, g) for o, a, v, g in entry["m"]}
        else:
            raise ValueError(f"unknown journal entry {kind!r}")

    # -- changes (event loop) --------------------------------------------------------------
    def state(self, queue: PopQueue) -> QueuePopState:
        return self.queues.setdefault(queue, QueuePopState())

    def popped(self, queue: PopQueue, next_offset: int, offsets: list[int], attempts: list[int],
               visible_at_ms: int) -> list[InFlight]:
        """Hand out `offsets` (new ones below `next_offset`, or redeliveries) until `visible_at_ms`."""
        state = self.state(queue)
        state.pop_offset = max(state.pop_offset, next_offset)
        handed = []
        for offset, attempt in zip(offsets, attempts, strict=True):
            previous = state.inflight.get(offset)
            entry = InFlight(attempt, visible_at_ms, previous.version + 1 if previous else 1)
            state.inflight[offset] = entry
            handed.append(entry)
        self._journal.record({"op": "pop", "g": queue.group, "t": queue.topic, "q": queue.queue_id,
                              "next": state.pop_offset,
                              "m": [[o, e.attempts, e.visible_at_ms, e.version]
                                    for o, e in zip(offsets, handed, strict=True)]})
        return handed

    def acked(self, queue: PopQueue, offsets: list[int]) -> None:
        state = self.queues.get(queue)
        if state is None:   # never popped here: nothing to acknowledge
            return
        for offset in offsets:
            state.inflight.pop(offset, None)
        self._journal.record({"op": "ack", "g": queue.group, "t": queue.topic, "q": queue.queue_id,
                              "o": offsets})

    def changed(self, queue: PopQueue, offset: int, visible_at_ms: int) -> InFlight:
        """A new invisibility for an in-flight message (and a new receipt handle generation)."""
        entry = self.state(queue).inflight[offset]
        entry.version += 1
        self.renewed(queue, offset, visible_at_ms)
        return entry

    def renewed(self, queue: PopQueue, offset: int, visible_at_ms: int) -> None:
        """A new invisibility for an in-flight message under the same receipt handle."""
        state = self.state(queue)
        entry = state.inflight[offset]
        entry.visible_at_ms = visible_at_ms
        self._journal.record({"op": "pop", "g": queue.group, "t": queue.topic, "q": queue.queue_id,
                              "next": state.pop_offset,
                              "m": [[offset, entry.attempts, entry.visible_at_ms, entry.version]]})

    # -- durability ----------------------------------------------------------------------
    async def sync(self) -> None:
        """Return once every change recorded so far is on disk."""
        await self._journal.sync()

    def _snapshot(self) -> list[dict[str, Any]]:
        return [{"op": "state", "g": q.group, "t": q.topic, "q": q.queue_id, "next": s.pop_offset,
                 "m": [[o, e.attempts, e.visible_at_ms, e.version] for o, e in s.inflight.items()]}
                for q, s in self.queues.items()]
