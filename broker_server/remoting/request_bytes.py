"""Bytes of remoting request frames the broker holds (admitted and not yet answered), bounded on
one connection, for one account and over all of them: a connection whose next frame would pass a
bound is not read (its transport paused) until earlier requests finish, so clients cannot make the
broker buffer more requests than `RemotingLimits.max_request_bytes_per_connection` /
`max_request_bytes_per_account` / `max_request_bytes`. Nothing is counted before a frame's header
was admitted (remoting_server: the header is read, and its signature checked, first), so a caller
without an account reserves nothing, and one account's slow or stuck frames hold only its share."""

from __future__ import annotations

from collections.abc import Callable, Hashable


class RequestBytes:
    def __init__(self, total: int, per_connection: int, per_account: int) -> None:
        self.total = total
        self.per_connection = per_connection
        self.per_account = per_account
        self.held = 0
        self._by_connection: dict[Hashable, int] = {}
        self._by_account: dict[str, int] = {}
        self._waiting: dict[Hashable, Callable[[], None]] = {}

    def held_by(self, account: str) -> int:
        return self._by_account.get(account, 0)

    def try_acquire(self, connection: Hashable, account: str, size: int) -> bool:
        """Count `size` more bytes for `connection` and `account` if they fit; False (nothing
        counted) if not. A lone frame always fits each bound it is alone in (frames are at most
        max_frame_bytes). One function, no call per bound: it runs once per request."""
        by_connection = self._by_connection.get(connection, 0)
        by_account = self._by_account.get(account, 0)
        held = self.held
        if ((by_connection and by_connection + size > self.per_connection)
                or (by_account and by_account + size > self.per_account)
                or (held and held + size > self.total)):
            return False
        self.held = held + size
        self._by_connection[connection] = by_connection + size
        self._by_account[account] = by_account + size
        return True

    def wait(self, connection: Hashable, wake: Callable[[], None]) -> None:
        """Call `wake` once, at the next release (of any connection's bytes): then try again."""
        self._waiting[connection] = wake

    def forget(self, connection: Hashable) -> None:
        """`connection` waits no more (it closed)."""
        self._waiting.pop(connection, None)

    def release(self, connection: Hashable, account: str, size: int) -> None:
        """Count `size` bytes less (a key whose count reaches 0 leaves its table); wake the waiting.
        No call per table: it runs once per request."""
        self.held -= size
        by_connection, by_account = self._by_connection, self._by_account
        left = by_connection[connection] - size
        if left:
            by_connection[connection] = left
        else:
            del by_connection[connection]
        left = by_account[account] - size
        if left:
            by_account[account] = left
        else:
            del by_account[account]
        if self._waiting:
            waiting, self._waiting = self._waiting, {}
            for wake in waiting.values():
                wake()

