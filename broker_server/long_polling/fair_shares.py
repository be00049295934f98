"""A bounded table shared fairly between accounts (rmq.broker_server.security.caller): what the
broker holds for waiting callers (held pulls, held RocketMQ 5 receives). While there is room anyone
may add; when the table is full, an account holding fewer than the account holding most takes the
place of that account's oldest entry, which its owner then answers at once (as at its timeout:
the client simply asks again); anyone else is refused. So of n accounts each keeps at least
capacity // n entries, and one account filling the table locks nobody out. Not thread-safe: the
owner serialises calls (docs/filtering-and-bounds.md)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

from rmq.broker_server.errors import BrokerError
from rmq.v1 import rmq_pb2

T = TypeVar("T", bound=Hashable)


def adjust_count(counts: dict[str, int], key: str, change: int) -> None:
    """Add `change` to a count, dropping it at zero (the tables hold only live keys)."""
    left = counts.get(key, 0) + change
    if left:
        counts[key] = left
    else:
        counts.pop(key, None)


class ShareExceeded(BrokerError):
    """The table is full and the account already holds at least as many entries as any other."""

    def __init__(self, message: str = "") -> None:
        super().__init__(rmq_pb2.LIMIT_EXCEEDED, message)


class FairShares(Generic[T]):
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._by_account: dict[str, dict[T, None]] = {}   # each account's entries, oldest first
        self._size = 0

    def admit(self, account: str, entry: T) -> T | None:
        """Add `entry` for `account`. When the table is full: take out and return the oldest entry
        of the account holding most, if that account holds more than `account` then will; else
        raise ShareExceeded (nothing changes)."""
        displaced = self._make_room(account) if self._size >= self.capacity else None
        self._by_account.setdefault(account, {})[entry] = None
        self._size += 1
        return displaced

    def remove(self, account: str, entry: T) -> bool:
        """Take `entry` out; False when it is not in the table (displaced or removed before)."""
        entries = self._by_account.get(account)
        if entries is None or entry not in entries:
            return False
        del entries[entry]
        if not entries:
            del self._by_account[account]
        self._size -= 1
        return True

    def count(self, account: str | None = None) -> int:
        """Entries in all, or of one account."""
        return self._size if account is None else len(self._by_account.get(account, ()))

    def clear(self) -> None:
        self._by_account.clear()
        self._size = 0

    def _make_room(self, account: str) -> T:
        if not self._by_account:
            raise ShareExceeded()
        largest = max(self._by_account, key=lambda name: len(self._by_account[name]))
        if len(self._by_account[largest]) <= self.count(account) + 1:
            raise ShareExceeded()
        oldest = next(iter(self._by_account[largest]))
        self.remove(largest, oldest)
        return oldest
