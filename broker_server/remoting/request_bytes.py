"""Bytes of remoting request frames the broker holds (read and not yet answered), bounded on one
connection and over all of them: a connection whose next frame would pass either bound is not read
until earlier requests finish, so clients cannot make the broker buffer more requests than
`RemotingLimits.max_request_bytes_per_connection` / `max_request_bytes`."""

from __future__ import annotations

import asyncio
from collections.abc import Hashable


class RequestBytes:
    def __init__(self, total: int, per_connection: int) -> None:
        self.total = total
        self.per_connection = per_connection
        self.held = 0
        self._by_connection: dict[Hashable, int] = {}
        self._released = asyncio.Event()

    def _fits(self, connection: Hashable, size: int) -> bool:
        held_here = self._by_connection.get(connection, 0)
        # a lone frame always fits its own connection (frames are at most max_frame_bytes)
        return (held_here == 0 or held_here + size <= self.per_connection) and (
            self.held == 0 or self.held + size <= self.total
        )

    async def acquire(self, connection: Hashable, size: int) -> None:
        """Wait until `size` more bytes fit, then count them for `connection`."""
        while not self._fits(connection, size):
            self._released.clear()
            await self._released.wait()
        self.held += size
        self._by_connection[connection] = self._by_connection.get(connection, 0) + size

    def release(self, connection: Hashable, size: int) -> None:
        self.held -= size
        left = self._by_connection[connection] - size
        if left:
            self._by_connection[connection] = left
        else:
            del self._by_connection[connection]
        self._released.set()
