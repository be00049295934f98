"""A small state table's changes as an append-only file of JSON lines under `<store>/config/`
(the pop state, open transactions): a change is one line, written and fsynced before the broker
answers, and concurrent callers share one write (group commit), so a change costs an append,
not a rewrite of the whole table. Replaying the lines rebuilds the table; a torn last line
(a crash mid-write) is ignored. Once the file holds `compact_after` lines it is rewritten as a
snapshot of the live table (temporary file, fsync, rename, directory fsync)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.store.private_files import append_durably, make_dirs, write_durably

log = logging.getLogger(__name__)
Entry = dict[str, Any]


def _line(entry: Entry) -> str:
    return json.dumps(entry, separators=(",", ":")) + "\n"


class Journal:
    def __init__(self, path: Path, executor: StoreExecutor, snapshot: Callable[[], list[Entry]],
                 compact_after: int) -> None:
        """`snapshot()` gives the entries that rebuild the live table on their own."""
        self.path = path
        self.executor = executor
        self._snapshot = snapshot
        self.compact_after = compact_after
        self._pending: list[str] = []
        self._seq = 0
        self._durable = 0
        self._lines = 0
        self._write_lock = asyncio.Lock()

    def replay(self, apply: Callable[[Entry], None]) -> None:
        """Apply every whole line, oldest first; `apply` raises ValueError, KeyError or
        TypeError for a line it cannot use, which ends the replay there (a torn write)."""
        if not self.path.exists():
            return
        with open(self.path, encoding="utf-8") as journal:
            for number, line in enumerate(journal, start=1):
                try:
                    apply(json.loads(line))
                except (ValueError, KeyError, TypeError) as error:
                    log.warning("%s line %d ignored (%s): a write torn by a crash", self.path, number, error)
                    break
                self._lines += 1

    def record(self, entry: Entry) -> None:
        """A change, durable at the next `sync`."""
        self._pending.append(_line(entry))
        self._seq += 1

    async def sync(self) -> None:
        """Return once every change recorded so far is on disk."""
        target = self._seq
        async with self._write_lock:
            if self._durable >= target:
                return
            lines, upto = self._pending, self._seq
            self._pending = []
            if self._lines + len(lines) > self.compact_after:
                snapshot = [_line(entry) for entry in self._snapshot()]
                await self.executor.run(self._rewrite, snapshot)
                self._lines = len(snapshot)
            else:
                await self.executor.run(self._append, lines)
                self._lines += len(lines)
            self._durable = upto

    def rewrite_now(self) -> None:
        """Replace the file with a snapshot at once (loading, before the event loop runs)."""
        snapshot = [_line(entry) for entry in self._snapshot()]
        self._rewrite(snapshot)
        self._lines = len(snapshot)

    def _append(self, lines: list[str]) -> None:
        make_dirs(self.path.parent)
        append_durably(self.path, "".join(lines).encode())

    def _rewrite(self, lines: list[str]) -> None:
        write_durably(self.path, "".join(lines).encode())
