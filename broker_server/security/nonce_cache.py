"""Replay defence for signed requests: every nonce accepted inside the time window is
remembered, per account, and nothing signed before the server started is accepted.

Each account has its own bounded NonceCache, so one account (however many calls it signs)
can only narrow its own window, never another account's. Entries leave a cache in timestamp
order: those older than the window go first (the window check refuses their replays anyway);
when the cache is still full the oldest one goes and its timestamp becomes that account's
floor, below which its requests are refused, so an evicted nonce can never be replayed.

Nonces live in memory only; a restarted server refuses every call signed before it started
(`ReplayGuard.started_ms`), so what the previous process accepted cannot be replayed to it.
"""

from __future__ import annotations

import heapq
import threading

DEFAULT_ACCOUNT_CAPACITY = 20_000   # nonces per account: 333 calls/s over a 60 s window


class NonceCache:
    def __init__(self, window_ms: int, capacity: int = DEFAULT_ACCOUNT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("nonce cache capacity must be at least 1")
        self.window_ms = window_ms
        self.capacity = capacity
        self._seen: set[int] = set()
        self._by_time: list[tuple[int, int]] = []   # heap of (request timestamp ms, nonce)
        self._floor_ms = -1

    def admit(self, nonce: int, timestamp_ms: int, now_ms: int) -> bool:
        """Record the nonce of a request signed at `timestamp_ms` (already inside the window);
        False when it was seen before or is at or below the eviction floor."""
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


class ReplayGuard:
    """The nonce caches of all accounts of one server process (thread-safe)."""

    def __init__(self, window_ms: int, account_capacity: int, started_ms: int) -> None:
        if account_capacity < 1:
            raise ValueError("nonce cache capacity must be at least 1")
        self.window_ms = window_ms
        self.account_capacity = account_capacity
        self.started_ms = started_ms
        self._caches: dict[str, NonceCache] = {}
        self._lock = threading.Lock()

    def admit(self, access_key: str, nonce: str, timestamp_ms: int, now_ms: int) -> bool:
        """False for a replay: the nonce was already used by this account inside the window, or
        the request is older than what the account's full cache had to forget."""
        with self._lock:
            cache = self._caches.get(access_key)
            if cache is None:
                cache = self._caches[access_key] = NonceCache(self.window_ms, self.account_capacity)
            return cache.admit(int(nonce, 16), timestamp_ms, now_ms)

    def nonces(self, access_key: str) -> int:
        with self._lock:
            cache = self._caches.get(access_key)
            return len(cache) if cache is not None else 0
