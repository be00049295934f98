"""ProcessQueue: the consumer-side snapshot of one MessageQueue (spec consumer-pull-rebalance
§2.2; consumption-longpolling-offsets §4, §12.4).

It holds the pulled messages not yet consumed, keyed by queue offset. Pulls put messages in
increasing offset order, so the sorted map is a dict plus a deque of the offsets in order,
whose ends are trimmed lazily of removed offsets (O(1) amortized smallest / largest key).
`remove_message` returns the smallest offset still held (or, once empty, the largest offset
ever put + 1, or where the last pull ended when it filtered messages out after those): the
smallest-offset rule that keeps a slow message from letting progress run past it, and
correctTagsOffset, so a filtered group's lag clears (docs/client-behaviour.md "Filtered
messages move the offset"). Count, size and span feed the pull flow control (TV-7).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from rmq.connector.message import MessageExt

PULL_MAX_IDLE_TIME_MS = 120000   # a queue not pulled for this long is dropped by rebalance
CLEAN_EXPIRED_MAX_LOOPS = 16     # ProcessQueue#cleanExpiredMsg looks at most at 16 messages
# orderly (spec consumer-startup-allocation-ordering §5.1): lockAll period, and how long the
# client trusts its own lock flag (the broker's lock lives 60 s)
REBALANCE_LOCK_INTERVAL_S = 20.0
REBALANCE_LOCK_MAX_LIVE_TIME_S = 30.0


class ProcessQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._messages: dict[int, MessageExt] = {}   # queue offset -> message
        self._order: deque[int] = deque()             # offsets put, ascending (removed ones trimmed lazily)
        self._consume_started: dict[int, float] = {}  # queue offset -> clock() when handed out
        self.msg_count = 0
        self.msg_size = 0                 # body bytes held
        self.queue_offset_max = -1
        self.pulled_until = -1            # where the last pull ended: what is before it was put or filtered
        self._dropped = False
        self._cancel_pull: Callable[[], object] | None = None   # the pull in flight for this queue
        self.last_pull_timestamp = clock()
        self.last_consume_timestamp = clock()   # the last batch consumed (removed or committed)
        # orderly consumption (spec consumer-pull-rebalance §2.2, §17)
        self._consuming_orderly: dict[int, MessageExt] = {}   # consumingMsgOrderlyTreeMap
        self.consuming = False            # an orderly consume request is running or queued
        self.locked = False
        self.last_lock_timestamp = clock()
        # dropped while its listener ran, so still in RebalanceImpl's table (its lock renewed)
        # until a rebalance can remove it; a fresh ProcessQueue replaces it if the queue stays ours
        self.removal_pending = False
        self.lock_consume = threading.Lock()   # held while the orderly listener runs

    @property
    def dropped(self) -> bool:
        return self._dropped

    @dropped.setter
    def dropped(self, value: bool) -> None:
        """Dropping the queue (it moved to another member, was sought, or the consumer stops) also
        cancels its pull in flight: a long-polling pull held for a queue this consumer no longer
        reads would otherwise stay in the broker's hold table until its suspend time runs out."""
        self._dropped = value
        with self._lock:
            cancel = self._cancel_pull if value else None
        if cancel is not None:
            cancel()

    def pull_started(self, cancel: Callable[[], object]) -> None:
        """A pull of this queue is in flight; `cancel` ends it (at once if the queue is dropped)."""
        with self._lock:
            self._cancel_pull = cancel
        if self._dropped:
            cancel()

    def put_message(self, messages: Sequence[MessageExt], pulled_until: int = -1) -> bool:
        """Add pulled messages (offsets already held are skipped) and, in the same locked step,
        record where the pull ended (as `mark_pulled_until`); True when an orderly consume
        request should be dispatched (messages held and none running: dispatchToConsume)."""
        with self._lock:
            self._advance_pulled_until(pulled_until)
            held, order = self._messages, self._order
            added = added_size = 0
            for message in messages:
                offset = message.queue_offset
                if offset in held:
                    continue
                held[offset] = message
                if order and offset < order[-1]:
                    order = self._order = deque(sorted([*order, offset]))
                else:
                    order.append(offset)
                added += 1
                added_size += len(message.body)
                if offset > self.queue_offset_max:
                    self.queue_offset_max = offset
            self.msg_count += added
            self.msg_size += added_size
            dispatch = bool(self._messages) and not self.consuming
            if dispatch:
                self.consuming = True
            return dispatch

    def mark_pulled_until(self, next_offset: int) -> None:
        """A pull ended at `next_offset` and its messages are put: once nothing is held, the
        offset to commit is at least there (the pull's filtered-out messages are done too)."""
        with self._lock:
            self._advance_pulled_until(next_offset)

    def _advance_pulled_until(self, next_offset: int) -> None:
        """(the lock is held) pulled_until only moves forward."""
        if next_offset > self.pulled_until:
            self.pulled_until = next_offset

    def remove_message(self, messages: Sequence[MessageExt]) -> int:
        """Remove a finished batch; the offset to commit: the smallest offset still held, once
        empty the largest offset put + 1 or where the last pull ended, whichever is larger, or
        -1 when nothing was held (TV-12)."""
        with self._lock:
            held, started = self._messages, self._consume_started
            if not held:
                return -1
            self.last_consume_timestamp = self.clock()
            for message in messages:
                offset = message.queue_offset
                started.pop(offset, None)
                removed = held.pop(offset, None)
                if removed is not None:
                    self.msg_count -= 1
                    self.msg_size -= len(removed.body)
            if self._messages:
                return self._first()
            self._order.clear()
            return max(self.queue_offset_max + 1, self.pulled_until)

    def _first(self) -> int:
        """The smallest offset held (the lock is held, the map is not empty)."""
        while self._order[0] not in self._messages:
            self._order.popleft()
        return self._order[0]

    def _last(self) -> int:
        while self._order[-1] not in self._messages:
            self._order.pop()
        return self._order[-1]

    def max_span(self) -> int:
        """Largest minus smallest offset held (0 when empty)."""
        with self._lock:
            if not self._messages:
                return 0
            return self._last() - self._first()

    def is_pull_expired(self) -> bool:
        return (self.clock() - self.last_pull_timestamp) * 1000 > PULL_MAX_IDLE_TIME_MS

    def mark_consume_started(self, messages: Sequence[MessageExt]) -> None:
        """The listener got these messages now (MessageAccessor.setConsumeStartTimeStamp)."""
        now = self.clock()
        with self._lock:
            held, started = self._messages, self._consume_started
            for message in messages:
                if message.queue_offset in held:
                    started[message.queue_offset] = now

    def expired_message(self, consume_timeout_s: float) -> MessageExt | None:
        """The smallest-offset message if its listener started more than the consume timeout
        ago (ProcessQueue#cleanExpiredMsg looks only at the first message)."""
        with self._lock:
            if not self._messages:
                return None
            offset = self._first()
            started = self._consume_started.get(offset)
            if started is None or self.clock() - started <= consume_timeout_s:
                return None
            return self._messages[offset]

    def held_offsets(self) -> list[int]:
        with self._lock:
            return sorted(self._messages)

    # ------------------------------------------------------------ orderly (spec consumer-pull-rebalance §17)

    def is_lock_expired(self) -> bool:
        return self.clock() - self.last_lock_timestamp > REBALANCE_LOCK_MAX_LIVE_TIME_S

    def take_messages(self, batch_size: int) -> list[MessageExt]:
        """takeMessags: the `batch_size` smallest offsets move into the consuming map; an empty
        list (nothing held) ends the consume request (consuming = False)."""
        with self._lock:
            taken: list[MessageExt] = []
            while self._messages and len(taken) < batch_size:
                message = self._messages.pop(self._first())
                self._consuming_orderly[message.queue_offset] = message
                taken.append(message)
            if not taken:
                self.consuming = False
            return taken

    def commit(self) -> int:
        """The consuming map's largest offset + 1 (or, when nothing else is held, where the last
        pull ended if that is further); -1 when empty; the map is cleared (TV-20)."""
        with self._lock:
            if not self._consuming_orderly:
                return -1
            self.last_consume_timestamp = self.clock()
            offset = max(self._consuming_orderly) + 1
            if not self._messages:
                offset = max(offset, self.pulled_until)
            self.msg_count -= len(self._consuming_orderly)
            self.msg_size -= sum(len(m.body) for m in self._consuming_orderly.values())
            self._consuming_orderly.clear()
            return offset

    def make_message_to_consume_again(self, messages: Sequence[MessageExt]) -> None:
        """makeMessageToCosumeAgain: roll the messages back from the consuming map (TV-20)."""
        with self._lock:
            for message in messages:
                self._consuming_orderly.pop(message.queue_offset, None)
                self._messages[message.queue_offset] = message
            self._order = deque(sorted(self._messages))

    def has_temp_message(self) -> bool:
        """Messages held or being consumed (an unlock is then delayed)."""
        with self._lock:
            return bool(self._messages or self._consuming_orderly)
