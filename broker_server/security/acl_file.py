"""The `--acl FILE` of a running server: loaded at start, reloaded when the file changes
(mtime polling) or on SIGHUP. A reload that fails keeps the ACL in force and logs why, so
a bad edit neither opens the server nor locks everyone out."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from pathlib import Path

from rmq.broker_server.security.acl import Acl, AclError, load_acl

log = logging.getLogger("rmq.acl")

DEFAULT_POLL_INTERVAL_S = 2.0


class AclFile:
    def __init__(self, path: Path) -> None:
        """Load the file; raises AclError (naming the file and entry) when it is unusable."""
        self.path = path
        self._stamp = self._file_stamp()
        self._acl = load_acl(path)

    @property
    def acl(self) -> Acl:
        return self._acl

    def reload(self) -> bool:
        """Load the file again; on error keep the current ACL. True when the new one is in force."""
        self._stamp = self._file_stamp()
        try:
            self._acl = load_acl(self.path)
        except AclError as error:
            log.error("ACL not reloaded, keeping the previous one: %s", error)
            return False
        log.info("ACL reloaded from %s: %d account(s)", self.path, len(self._acl.accounts))
        return True

    def reload_if_changed(self) -> bool:
        """Reload when the file's mtime, size or inode changed since the last load."""
        if self._file_stamp() == self._stamp:
            return False
        return self.reload()

    async def watch(self, interval_s: float = DEFAULT_POLL_INTERVAL_S) -> None:
        """Poll for changes until cancelled; run it as a task on the server's event loop."""
        while True:
            await asyncio.sleep(interval_s)
            self.reload_if_changed()

    def reload_on_sighup(self, loop: asyncio.AbstractEventLoop) -> None:
        loop.add_signal_handler(signal.SIGHUP, self.reload)

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size, stat.st_ino
