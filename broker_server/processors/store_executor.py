"""Blocking store calls (sync-flush appends wait for the disk, large reads copy megabytes)
run on a small thread pool, so the gRPC event loop keeps answering other RPCs meanwhile."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class StoreExecutor:
    def __init__(self, threads: int) -> None:
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="store-call")

    async def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(
            self._pool, functools.partial(function, *args, **kwargs)
        )

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True)
