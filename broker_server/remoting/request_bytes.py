"""Bytes of remoting request frames the broker holds (read and not yet answered), bounded on one
connection and over all of them: a connection whose next frame would pass either bound is not read
(its transport paused) until earlier requests finish, so clients cannot make the broker buffer more
requests than `RemotingLimits.max_request_bytes_per_connection` / `max_request_bytes`."""

from __future__ import annotations

from collections.abc import Callable, Hashable


class RequestBytes:
    def __init__(self, total: int, per_connection: int) -> None:
        self.total = total
        self.per_connection = per_connection
        self.held = 0
        self._by_connection: dict[Hashable, int] = {}
        self._waiting: dict[Hashable, Callable[[], None]] = {}

    def _fits(self, connection: Hashable, size: int) -> bool:
        held_here = self._by_connection.get(connection, 0)
        # a lone frame always fits its own connection (frames are at most max_frame_bytes)
        return (held_here == 0 or held_here + size <= self.per_connection) and (
            self.held == 0 or self.held + size <= self.total
        )

    def try_acquire(self, connection: Hashable, size: int) -> bool:
        """Count `size` more bytes for `connection` if they fit; False (nothing counted) if not."""
        if not self._fits(connection, size):
            return False
        self.held += size
        self._by_connection[connection] = self._by_connection.get(connection, 0) + size
        return True

    def wait(self, connection: Hashable, wake: Callable[[], None]) -> None:
        """Call `wake` once, at the next release (of any connection's bytes): then try again."""
        self._waiting[connection] = wake

    def forget(self, connection: Hashable) -> None:
        """`connection` waits no more (it closed)."""
        self._waiting.pop(connection, None)

    def release(self, connection: Hashable, size: int) -> None:
        self.held -= size
        left = self._by_connection[connection] - size
        if left:
            self._by_connection[connection] = left
        else:
            del self._by_connection[connection]
        if self._waiting:
            waiting, self._waiting = self._waiting, {}
            for wake in waiting.values():
                wake()
