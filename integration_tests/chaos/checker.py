"""The chaos run's checker (OpenChaos's queue model) over the recorded history:

- every send attempt (client_process producer lines): body, attempt, status, broker, queue, offset;
- every message the orderly consumers took (consumer lines): body, broker, queue, offset;
- the offsets the consumers committed, per queue;
- the members' roles (and broker group) as the monitor saw them;
- the faults: kind, when injected, when healed.

Per fault (the window from its injection to the next fault's, or to the end of the run):

- `acknowledged`: bodies answered SEND_OK in the window;
- `lost`: of those, bodies no consumer ever took;
- `duplicated`: takes of a body beyond the times it was sent (a retried send may be stored
  twice; anything beyond that is a duplicate), counted in the window of its SEND_OK;
- `out_of_order`: first takes of a message after a later message of the same key taken from the
  same queue (a queue is a broker group's queue id; the producers send each key to one queue,
  one at a time, so the queue holds them in order; a route change may move a key to another
  queue, where its order starts again);
- `committed_unreceived`: bodies answered SEND_OK that a consumer's committed offset passed
  (moved beyond their queue offset) before any consumer had taken them, counted in the window of
  that commit (a consumer that skips a message and commits past it loses it on the next
  rebalance or restart, even when it reads it again meanwhile);
- `max_unavailable_s`: the longest time in the window without any send answered SEND_OK;
- `group_unavailable_s`, per broker group, and its maximum `max_group_unavailable_s`: the longest
  time in the window a group was sent to and answered none SEND_OK (`refusals`: from the first
  send after its previous SEND_OK to its next). The producers send each key from a thread of its
  own, one message at a time, retrying until SEND_OK (RocketMQ's orderly sends by key): keys on a
  healthy group go on while a faulted group refuses, so max_unavailable_s is the time *no* group
  took a write, and a group's own figure is how long it refused the keys waiting on it;
- `max_without_master_s`: the longest time in the window some broker group had no member
  answering as master of the group's newest epoch (a deposed master that still says master does
  not count; one nobody has replaced yet does, whether or not it can replicate).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import accumulate
from pathlib import Path

SEND_OK = "SEND_OK"
MASTER_ROLES = frozenset({"SYNC_MASTER", "ASYNC_MASTER"})
BEFORE_FAULTS = "none (before the first fault)"


@dataclass(frozen=True)
class Send:
    t: float
    body: str
    attempt: int
    status: str
    position: tuple[int, int] = (-1, -1)     # (queue, offset) the answer named
    broker: str = ""                         # the broker group of the queue it went to ("": no route)
    sent: float | None = None                # when it was sent (None: at `t`, as old histories)

    @property
    def started(self) -> float:
        return self.t if self.sent is None else self.sent


@dataclass(frozen=True)
class Take:
    t: float
    body: str
    position: tuple[int, int] = (-1, -1)     # (queue, offset) it was read at
    broker: str = ""                         # the broker group of that queue

    @property
    def queue(self) -> tuple[str, int]:
        return self.broker, self.position[0]


@dataclass(frozen=True)
class Commit:
    t: float
    queue: tuple[str, int]    # (broker group, queue id)
    offset: int               # the consumer's committed offset (the next to consume)


@dataclass(frozen=True)
class RoleSample:
    t: float
    member: str
    role: str | None      # None: the member did not answer
    epoch: int = 0
    group: str = ""       # the member's broker group (epochs are per group)


@dataclass(frozen=True)
class FaultWindow:
    kind: str
    start: float
    healed: float


@dataclass
class History:
    sends: list[Send] = field(default_factory=list)
    takes: list[Take] = field(default_factory=list)
    roles: list[RoleSample] = field(default_factory=list)
    faults: list[FaultWindow] = field(default_factory=list)
    end: float = 0.0      # when producing stopped
    commits: list[Commit] = field(default_factory=list)

    @classmethod
    def read(cls, directory: Path, faults: list[FaultWindow], end: float) -> History:
        """The history the client processes wrote under `directory` (*.sends, *.takes, *.commits,
        roles)."""
        history = cls(faults=faults, end=end)
        for line in _lines(directory.glob("*.sends")):
            position = (line.get("queue", -1), line.get("offset", -1))
            history.sends.append(Send(line["t"], line["body"], line["attempt"], line["status"], position,
                                      line.get("broker", ""), line.get("s")))
        for line in _lines(directory.glob("*.takes")):
            history.takes.append(Take(line["t"], line["body"], (line["queue"], line["offset"]),
                                      line["broker"]))
        for line in _lines(directory.glob("*.commits")):
            history.commits.append(Commit(line["t"], (line["broker"], line["queue"]), line["offset"]))
        for line in _lines(directory.glob("*.roles")):
            history.roles.append(RoleSample(line["t"], line["member"], line["role"], line["epoch"],
                                            line["group"]))
        return history


def _lines(paths: Iterable[Path]) -> Iterable[dict]:
    for path in sorted(paths):
        for text in path.read_text().splitlines():
            if text.strip():
                yield json.loads(text)


@dataclass
class FaultFigures:
    faults: int = 0
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    committed_unreceived: int = 0
    max_unavailable_s: float = 0.0
    max_without_master_s: float = 0.0
    max_group_unavailable_s: float = 0.0
    group_unavailable_s: dict[str, float] = field(default_factory=dict)
    # the part of that stretch after the fault was healed (a killed member restarted, a cut mended):
    # what the service itself adds to a fault that, as scheduled, left nothing able to serve
    group_after_heal_s: dict[str, float] = field(default_factory=dict)

    def add(self, other: FaultFigures) -> None:
        self.faults += other.faults
        self.acknowledged += other.acknowledged
        self.lost += other.lost
        self.duplicated += other.duplicated
        self.out_of_order += other.out_of_order
        self.committed_unreceived += other.committed_unreceived
        self.max_unavailable_s = max(self.max_unavailable_s, other.max_unavailable_s)
        self.max_without_master_s = max(self.max_without_master_s, other.max_without_master_s)
        self.max_group_unavailable_s = max(self.max_group_unavailable_s, other.max_group_unavailable_s)
        for mine, theirs in ((self.group_unavailable_s, other.group_unavailable_s),
                             (self.group_after_heal_s, other.group_after_heal_s)):
            for group, seconds in theirs.items():
                mine[group] = max(seconds, mine.get(group, 0.0))


@dataclass(frozen=True)
class Window:
    kind: str
    start: float
    end: float

    def holds(self, t: float) -> bool:
        return self.start <= t < self.end


def windows(history: History) -> list[Window]:
    """The run cut at each fault's injection; the part before the first fault is its own."""
    starts = sorted(history.faults, key=lambda f: f.start)
    first = starts[0].start if starts else history.end
    found = [Window(BEFORE_FAULTS, float("-inf"), first)]
    for fault, following in zip(starts, [*starts[1:], None], strict=True):
        found.append(Window(fault.kind, fault.start, following.start if following else history.end))
    return found


def longest_gap(times: Sequence[float], start: float, end: float) -> float:
    """The longest stretch of [start, end] holding none of `times`."""
    inside = sorted(t for t in times if start <= t <= end)
    edges = [start, *inside, end]
    return max(b - a for a, b in zip(edges, edges[1:], strict=False))


def refusals(sends: Sequence[Send], group: str) -> list[tuple[float, float]]:
    """The stretches in which `group` was asked for a write and answered none SEND_OK: each from
    the first send to the group after its previous SEND_OK (not before that SEND_OK) to its next
    SEND_OK (to infinity when none came). Time in which nobody sent to the group is not counted
    (a group no key maps to for a while is not unavailable)."""
    found = []
    previous, asked = float("-inf"), None
    for send in sorted((send for send in sends if send.broker == group), key=lambda send: send.t):
        start = max(previous, send.started)
        asked = start if asked is None else min(asked, start)
        if send.status == SEND_OK:
            found.append((asked, send.t))
            previous, asked = send.t, None
    if asked is not None:
        found.append((asked, float("inf")))
    return found


def longest_inside(stretches: Sequence[tuple[float, float]], start: float, end: float) -> float:
    """The longest part of one of `stretches` inside [start, end]."""
    return max((min(b, end) - max(a, start) for a, b in stretches), default=0.0)


def order_key(body: str, keys: int) -> tuple[str, int, int]:
    """(producer, key, number) of a producer's body "NAME-NUMBER" (key = number % keys)."""
    producer, _, number = body.rpartition("-")
    return producer, int(number) % keys, int(number)


def out_of_order_takes(takes: Sequence[Take], keys: int) -> list[Take]:
    """First takes of a message that come after the first take of a later message of its key
    from the same queue."""
    seen: set[str] = set()
    highest: dict[tuple[str, int, tuple[str, int]], int] = {}
    late = []
    for take in sorted(takes, key=lambda take: take.t):
        if take.body in seen:
            continue
        seen.add(take.body)
        producer, key, number = order_key(take.body, keys)
        stream = (producer, key, take.queue)
        if number < highest.get(stream, -1):
            late.append(take)
        highest[stream] = max(number, highest.get(stream, -1))
    return late


def commits_past_unreceived(history: History) -> list[float]:
    """When a committed offset first passed a body answered SEND_OK that no consumer had taken
    yet: one time per such body (a commit's offset is the next to consume, so offset O passes
    the queue offsets below O)."""
    first_take: dict[str, float] = {}
    for take in history.takes:
        first_take[take.body] = min(take.t, first_take.get(take.body, take.t))
    commits: dict[tuple[str, int], list[Commit]] = defaultdict(list)
    for commit in sorted(history.commits, key=lambda commit: commit.t):
        commits[commit.queue].append(commit)
    reach: dict[tuple[str, int], list[int]] = {     # per queue: the highest offset committed so far
        queue: list(accumulate((c.offset for c in found), max)) for queue, found in commits.items()}
    found = []
    for send in history.sends:
        queue = (send.broker, send.position[0])
        if send.status != SEND_OK or queue not in reach:
            continue
        passed = bisect_right(reach[queue], send.position[1])    # the first commit beyond its offset
        if passed < len(reach[queue]):
            when = commits[queue][passed].t
            if first_take.get(send.body, float("inf")) > when:
                found.append(when)
    return found


def masters_answering(roles: Sequence[RoleSample]) -> dict[str, list[float]]:
    """Per broker group: when a member answered as master of the group's newest epoch seen so far
    (an old master still answering as master after a newer one was elected does not count: it
    is deposed)."""
    newest: dict[str, int] = {}
    found: dict[str, list[float]] = {sample.group: [] for sample in roles}
    for sample in sorted(roles, key=lambda sample: sample.t):
        if sample.role in MASTER_ROLES and sample.epoch >= newest.get(sample.group, 0):
            newest[sample.group] = sample.epoch
            found[sample.group].append(sample.t)
    return found


def check(history: History, keys: int) -> dict[str, FaultFigures]:
    """Figures per fault kind (several faults of one kind add up; times are their maximum)."""
    acked_at = {}
    for send in sorted(history.sends, key=lambda send: send.t):
        if send.status == SEND_OK:
            acked_at.setdefault(send.body, send.t)
    attempts = Counter(send.body for send in history.sends)
    taken = Counter(take.body for take in history.takes)
    first_take = {}
    for take in sorted(history.takes, key=lambda take: take.t, reverse=True):
        first_take[take.body] = take.t
    late = out_of_order_takes(history.takes, keys)
    unreceived = commits_past_unreceived(history)
    ok_times = [send.t for send in history.sends if send.status == SEND_OK]
    master_times = masters_answering(history.roles)
    groups = sorted({send.broker for send in history.sends} - {""})
    refused = {group: refusals(history.sends, group) for group in groups}
    healed_at = {fault.start: fault.healed for fault in history.faults}
    figures: dict[str, FaultFigures] = defaultdict(FaultFigures)
    for window in windows(history):
        acked = [body for body, t in acked_at.items() if window.holds(t)]
        lo, hi = max(window.start, _first(history)), window.end
        healed = max(lo, healed_at.get(window.start, lo))
        one = FaultFigures(
            faults=0 if window.kind == BEFORE_FAULTS else 1,
            acknowledged=len(acked),
            lost=sum(1 for body in acked if body not in taken),
            duplicated=sum(max(0, taken[body] - attempts[body]) for body in acked),
            out_of_order=sum(1 for take in late if window.holds(first_take[take.body])),
            committed_unreceived=sum(1 for t in unreceived if window.holds(t)),
            max_unavailable_s=round(longest_gap(ok_times, lo, hi), 2) if hi > lo else 0.0,
            max_without_master_s=round(max(longest_gap(times, lo, hi) for times in master_times.values()), 2)
            if hi > lo and master_times else 0.0,
            group_unavailable_s={group: round(max(0.0, longest_inside(stretches, lo, hi)), 2)
                                 for group, stretches in refused.items()},
            group_after_heal_s={group: round(max(0.0, longest_inside(stretches, healed, hi)), 2)
                                for group, stretches in refused.items()} if hi > healed else {},
        )
        one.max_group_unavailable_s = max(one.group_unavailable_s.values(), default=0.0)
        figures[window.kind].add(one)
    return dict(figures)


def _first(history: History) -> float:
    """When the history starts: the first send."""
    return min((send.t for send in history.sends), default=history.end)


def lost_sends(history: History) -> list[tuple[Send, list[str]]]:
    """Each send answered SEND_OK whose body no consumer took, with the bodies the consumers
    took at its queue offset instead (a consumer that read another member's bytes there, e.g. a
    deposed master's, or the new master's after the old one dropped it, moved past it)."""
    taken = {take.body for take in history.takes}
    at: dict[tuple[str, tuple[int, int]], set[str]] = defaultdict(set)    # (group, position) -> bodies
    for take in history.takes:
        at[take.broker, take.position].add(take.body)
    return [(send, sorted(at.get((send.broker, send.position), ())))
            for send in history.sends if send.status == SEND_OK and send.body not in taken]


def written_over_untaken(history: History) -> bool:
    """Whether some send was answered SEND_OK at the (group, queue, offset) of an earlier
    SEND_OK whose body no consumer has taken: a new master stored a message where a deposed one
    holds an acknowledged one it will drop, so the consumers can take another body at a lost
    one's offset (`lost_sends`' "instead"). The new master gets there only once the producers
    sent it as many messages as the old master took alone; a loaded run's schedule can end short
    of that (a `make test` run stopped 8-14 messages below the lowest lost offset of each queue,
    and nothing was taken there)."""
    taken = {take.body for take in history.takes}
    first: dict[tuple[str, tuple[int, int]], Send] = {}
    for send in sorted((send for send in history.sends if send.status == SEND_OK), key=lambda send: send.t):
        earlier = first.setdefault((send.broker, send.position), send)
        if earlier.body != send.body and earlier.body not in taken:
            return True
    return False


def explain_lost(history: History) -> list[str]:
    """`lost_sends` in words: where each was stored, and what was taken there instead."""
    return [f"{send.body} (SEND_OK at t={send.t:.2f}, {send.broker} queue {send.position[0]} "
            f"offset {send.position[1]}): consumers took {instead or 'nothing'} there"
            for send, instead in lost_sends(history)]


def as_json(figures: dict[str, FaultFigures]) -> str:
    return json.dumps({kind: asdict(f) for kind, f in figures.items()}, indent=2) + "\n"
