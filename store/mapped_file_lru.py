"""MappedFileLru: bounds the ConsumeQueue files that hold a mapping at once (not in RocketMQ).

A mapping costs a map and, in Python's mmap, a duplicated fd: 2,000 topics x 4 queues held
~8,000 of each for as long as the broker ran, active or not. ConsumeQueue MappedFiles report
their accesses here (each at most once a second); past `max_mapped` files the least recently
used ones are unmapped, and
`unmap_idle` (run after each ConsumeQueue flush) unmaps those not accessed for `idle_ms`. An
unmapped file maps itself again on its next access (MappedFile._begin_access). A file is unmapped
only between accesses and once its written data is flushed (MappedFile.unmap_if_idle): one in
use or written since is kept as just used. Active queues stay mapped: no remap per pull.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rmq.store.mapped_file import MappedFile

log = logging.getLogger(__name__)


class MappedFileLru:
    def __init__(self, max_mapped: int, idle_ms: int) -> None:
        self.max_mapped = max_mapped
        self.idle_ms = idle_ms
        self._accessed: OrderedDict[MappedFile, float] = OrderedDict()   # least recently used first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Files counted as mapped (an upper bound: a file unmapped while being touched stays counted
        until it is picked again)."""
        return len(self._accessed)

    def touch(self, mapped: MappedFile) -> None:
        """`mapped` (mapped now) was accessed; unmap the least recently used files past the bound."""
        with self._lock:
            self._accessed[mapped] = time.monotonic()
            self._accessed.move_to_end(mapped)
            excess = len(self._accessed) - self.max_mapped
            victims = [self._accessed.popitem(last=False)[0] for _ in range(max(excess, 0))]
        if victims:
            self._unmap(victims)

    def forget(self, mapped: MappedFile) -> None:
        """`mapped` was closed or destroyed."""
        with self._lock:
            self._accessed.pop(mapped, None)

    def unmap_idle(self) -> int:
        """Unmap the files not accessed for idle_ms; returns how many."""
        deadline = time.monotonic() - self.idle_ms / 1000
        with self._lock:
            victims = []
            while self._accessed and next(iter(self._accessed.values())) <= deadline:
                victims.append(self._accessed.popitem(last=False)[0])
        return self._unmap(victims)

    def _unmap(self, victims: list[MappedFile]) -> int:
        unmapped = 0
        for mapped in victims:
            try:
                done = mapped.unmap_if_idle()
            except OSError as error:      # its flush failed: it stays mapped (and dirty)
                log.warning("cannot flush %s before unmapping it: %s", mapped.path, error)
                done = False
            if done:
                unmapped += 1
            else:
                with self._lock:
                    self._accessed[mapped] = time.monotonic()
        return unmapped
