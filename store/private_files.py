"""Files under a store directory are its owner's alone: message bodies, consumer offsets and
transactions must not be readable by other local users. Every file the store and the broker
create there is mode 0600 and every directory 0700, whatever the process umask (which can only
take bits away). `rmq broker` and `rmq namesrv` also run with umask 077, for files created by
code that does not come through here (SECURITY.md)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700
SERVER_UMASK = 0o077


def make_dirs(path: Path) -> None:
    """`mkdir -p` whose every new level is DIR_MODE (Path.mkdir(parents=True) gives the
    parents it creates the umask's mode)."""
    missing: list[Path] = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir(mode=DIR_MODE, exist_ok=True)


def open_private(path: Path, flags: int) -> int:
    """os.open; a file it creates is FILE_MODE."""
    return os.open(path, flags, FILE_MODE)


def append_durably(path: Path, data: bytes) -> None:
    """Append `data` to `path` (created FILE_MODE) and fsync it; a failed write is cut off again,
    so no half record precedes the next append (a journal's lines: the broker's topic table,
    pop state and open transactions)."""
    fd = open_private(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError:
            os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


def write_durably(path: Path, data: bytes) -> None:
    """Replace `path` through a temporary file that is fsync'd before the rename, then fsync
    the directory: after a crash or power cut the file is whole (old or new), never empty or
    half written. Each writing thread has its own temporary file: two writers of the same file
    at once (a periodic persist still running on the executor while shutdown persists) both
    succeed, the last rename winning."""
    make_dirs(path.parent)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = open_private(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
