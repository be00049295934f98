"""Replay defence for signed requests: remember every nonce accepted inside the time window.

The cache is bounded. Entries leave in timestamp order: those older than the window go
first (the window check refuses their replays anyway); when the cache is still full the
oldest one goes and its timestamp becomes a floor below which every request is refused,
so an evicted nonce can never be replayed. Under overload the effective window narrows,
it never opens.
"""

from __future__ import annotations

import heapq
import threading

DEFAULT_CAPACITY = 200_000


class NonceCache:
    def __init__(self, window_ms: int, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("nonce cache capacity must be at least 1")
        self.window_ms = window_ms
        self.capacity = capacity
        self._seen: set[str] = set()
        self._by_time: list[tuple[int, str]] = []   # heap of (request timestamp ms, nonce)
        self._floor_ms = -1
        self._lock = threading.Lock()

    def admit(self, nonce: str, timestamp_ms: int, now_ms: int) -> bool:
        """Record the nonce of a request signed at `timestamp_ms` (already inside the window);
        False when it was seen before or is at or below the eviction floor."""
        with self._lock:
            self._expire(now_ms)
            if nonce in self._seen or timestamp_ms <= self._floor_ms:
                return False
            if len(self._seen) >= self.capacity:
                self._floor_ms = max(self._floor_ms, self._evict_oldest())
                if timestamp_ms <= self._floor_ms:
                    return False
            self._seen.add(nonce)
            heapq.heappush(self._by_time, (timestamp_ms, nonce))
            return True

    def __len__(self) -> int:
        return len(self._seen)

    def _expire(self, now_ms: int) -> None:
        oldest_in_window = now_ms - self.window_ms
        while self._by_time and self._by_time[0][0] < oldest_in_window:
            self._evict_oldest()

    def _evict_oldest(self) -> int:
        timestamp_ms, nonce = heapq.heappop(self._by_time)
        self._seen.discard(nonce)
        return timestamp_ms
