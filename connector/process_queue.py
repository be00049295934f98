"""ProcessQueue: the consumer-side snapshot of one MessageQueue (spec consumer-pull-rebalance
§2.2; consumption-longpolling-offsets §4.3, §12.4).

It holds the pulled messages not yet consumed, keyed by queue offset. Pulls put messages in
increasing offset order, so the sorted map is a dict plus a deque of the offsets in order,
whose ends are trimmed lazily of removed offsets (O(1) amortized smallest / largest key).
`remove_message` returns the smallest offset still held (or, once empty, the largest offset
ever put + 1): the smallest-offset rule that keeps a slow message from letting progress run
past it. Count, size and span feed the pull flow control (TV-7).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from rmq.connector.message import MessageExt

PULL_MAX_IDLE_TIME_MS = 120000   # a queue not pulled for this long is dropped by rebalance
CLEAN_EXPIRED_MAX_LOOPS = 16     # ProcessQueue#cleanExpiredMsg looks at most at 16 messages


class ProcessQueue:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._messages: dict[int, MessageExt] = {}   # queue offset -> message
        self._order: deque[int] = deque()             # offsets put, ascending (removed ones trimmed lazily)
        self._consume_started: dict[int, float] = {}  # queue offset -> clock() when handed out
        self.msg_count = 0
        self.msg_size = 0                 # body bytes held
        self.queue_offset_max = -1
        self.dropped = False
        self.last_pull_timestamp = clock()

    def put_message(self, messages: Sequence[MessageExt]) -> None:
        """Add pulled messages (offsets already held are skipped)."""
        with self._lock:
            for message in messages:
                if message.queue_offset in self._messages:
                    continue
                self._messages[message.queue_offset] = message
                if self._order and message.queue_offset < self._order[-1]:
                    self._order = deque(sorted([*self._order, message.queue_offset]))
                else:
                    self._order.append(message.queue_offset)
                self.msg_count += 1
                self.msg_size += len(message.body)
                self.queue_offset_max = max(self.queue_offset_max, message.queue_offset)

    def remove_message(self, messages: Sequence[MessageExt]) -> int:
        """Remove a finished batch; the offset to commit: the smallest offset still held,
        the largest offset put + 1 once empty, or -1 when nothing was held (TV-12)."""
        with self._lock:
            if not self._messages:
                return -1
            for message in messages:
                removed = self._messages.pop(message.queue_offset, None)
                self._consume_started.pop(message.queue_offset, None)
                if removed is not None:
                    self.msg_count -= 1
                    self.msg_size -= len(removed.body)
            if self._messages:
                return self._first()
            self._order.clear()
            return self.queue_offset_max + 1

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
        return (self._clock() - self.last_pull_timestamp) * 1000 > PULL_MAX_IDLE_TIME_MS

    def mark_consume_started(self, messages: Sequence[MessageExt]) -> None:
        """The listener got these messages now (MessageAccessor.setConsumeStartTimeStamp)."""
        now = self._clock()
        with self._lock:
            for message in messages:
                if message.queue_offset in self._messages:
                    self._consume_started[message.queue_offset] = now

    def expired_message(self, consume_timeout_s: float) -> MessageExt | None:
        """The smallest-offset message if its listener started more than the consume timeout
        ago (ProcessQueue#cleanExpiredMsg looks only at the first message)."""
        with self._lock:
            if not self._messages:
                return None
            offset = self._first()
            started = self._consume_started.get(offset)
            if started is None or self._clock() - started <= consume_timeout_s:
                return None
            return self._messages[offset]

    def held_offsets(self) -> list[int]:
        with self._lock:
            return sorted(self._messages)
