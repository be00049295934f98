"""The store directory: recognise our own (store.json marker), refuse anything else, and hold
an exclusive lock so two processes never share one store."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from rmq.store.config import MessageStoreConfig
from rmq.store.errors import StoreError
from rmq.store.private_files import make_dirs, open_private, write_durably

MARKER_NAME = "store.json"
FORMAT_NAME = "rmq-store"
FORMAT_VERSION = 1
LOCK_NAME = "lock"
ABORT_NAME = "abort"
CHECKPOINT_NAME = "checkpoint"


def _layout(config: MessageStoreConfig) -> dict[str, int]:
    return {
        "mapped_file_size_commit_log": config.mapped_file_size_commit_log,
        "mapped_file_size_consume_queue": config.mapped_file_size_consume_queue,
        "max_hash_slot_num": config.max_hash_slot_num,
        "max_index_num": config.max_index_num,
    }


class StoreDirectory:
    def __init__(self, config: MessageStoreConfig) -> None:
        self.root = Path(config.store_dir)
        self._lock_fd: int | None = None
        try:
            self._open(config)
        except OSError as error:
            self.unlock()
            raise StoreError(f"{error.filename or self.root}: cannot use the store directory: "
                             f"{error.strerror or error}") from error

    def _open(self, config: MessageStoreConfig) -> None:
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"{self.root}: store directory path exists and is not a directory")
        make_dirs(self.root)
        marker = self.root / MARKER_NAME
        if marker.exists():
            self._check_marker(marker, config)
        else:
            entries = sorted(p.name for p in self.root.iterdir() if p.name != LOCK_NAME)
            if entries:
                shown = ", ".join(entries[:5]) + (", ..." if len(entries) > 5 else "")
                raise StoreError(f"{self.root}: not an rmq store directory (no {MARKER_NAME}) and not empty "
                                 f"(contains {shown}); refusing to use it")
        self._lock()
        if not marker.exists():
            data = {"format": FORMAT_NAME, "version": FORMAT_VERSION, **_layout(config)}
            # after a power cut the marker is whole or absent, never an empty file that makes
            # the store refuse to open
            write_durably(marker, (json.dumps(data, indent=2) + "\n").encode())

    def _check_marker(self, marker: Path, config: MessageStoreConfig) -> None:
        try:
            data = json.loads(marker.read_text())
        except (OSError, ValueError) as error:
            raise StoreError(f"{marker}: unreadable store marker ({error})") from error
        if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
            raise StoreError(f"{marker}: not an rmq store marker; refusing to use {self.root}")
        if data.get("version") != FORMAT_VERSION:
            raise StoreError(f"{marker}: store format version {data.get('version')!r} is not supported "
                             f"(this build reads version {FORMAT_VERSION})")
        for name, value in _layout(config).items():
            if data.get(name) != value:
                raise StoreError(f"{self.root}: store was created with {name}={data.get(name)}, "
                                 f"the configuration says {value}; refusing to open it")

    def _lock(self) -> None:
        fd = open_private(self.root / LOCK_NAME, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as error:
            os.close(fd)
            raise StoreError(f"{self.root}: store directory is in use by another process") from error
        self._lock_fd = fd

    @property
    def abort_file(self) -> Path:
        return self.root / ABORT_NAME

    @property
    def checkpoint_file(self) -> Path:
        return self.root / CHECKPOINT_NAME

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

