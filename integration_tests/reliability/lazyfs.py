"""A FUSE filesystem that loses whatever was not fsync'd, to test durability against power loss
(the idea of Jepsen's LazyFS).

Files live in a backing directory on a real disk (the "durable layer"). Data written to a file,
by write(2) or by the kernel writing back dirty pages of a shared mmap, is kept in this
process's memory (the "volatile layer", page by page) and reaches the backing file only when
the file is fsync'd: fsync(2), fdatasync(2) or msync(MS_SYNC), which the kernel turns into
FUSE_FSYNC after writing the dirty pages back. Killing this process (`kill -9`) and detaching
the mount is a power cut: the volatile layer and the kernel's page cache of the mount vanish,
and a new mount of the backing directory shows exactly the data that was synced.

Model limits: metadata (create, truncate, rename, unlink, mkdir) is durable at once, like a
journalling filesystem that commits metadata before data; data is lost or kept per page.

A slow disk: with a fsync delay every fsync takes that long (a sync-flush broker then answers
FLUSH_DISK_TIMEOUT).

Run as `python -m integration_tests.reliability.lazyfs BACKING MOUNTPOINT [FSYNC_DELAY_S]`
(foreground); `VolatileDisk` mounts it for a test and cuts the power.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

PAGE = 4096
MOUNT_TIMEOUT_S = 20.0


def fuse_unavailable_reason() -> str | None:
    """Why a FUSE filesystem cannot be mounted here, or None when it can be tried."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse on this machine"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not installed (Debian package fuse3; `make venv` installs it as root)"
    try:
        import mfusepy  # noqa: F401  (loads libfuse3)
    except (ImportError, OSError) as error:
        return f"mfusepy / libfuse3 cannot be loaded: {error}"
    return None


class LazyFS:
    """The FUSE operations (mfusepy.Operations protocol, nanosecond times)."""

    use_ns = True

    def __init__(self, backing: Path, fsync_delay_s: float = 0.0) -> None:
        self.backing = backing
        self.fsync_delay_s = fsync_delay_s
        self._lock = threading.Lock()
        self._pages: dict[str, dict[int, bytearray]] = {}   # path -> page index -> unsynced page
        self._sizes: dict[str, int] = {}                      # path -> size including unsynced writes

    def _real(self, path: str) -> str:
        return str(self.backing) + path

    # -- metadata: straight to the backing directory -------------------------------------------

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = _os_call(os.lstat, self._real(path))
        attrs = {key: getattr(st, key) for key in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size",
                                                   "st_atime_ns", "st_mtime_ns", "st_ctime_ns")}
        for key in ("atime", "mtime", "ctime"):
            attrs[f"st_{key}"] = attrs.pop(f"st_{key}_ns")
        with self._lock:
            attrs["st_size"] = max(attrs["st_size"], self._sizes.get(path, 0))
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *_os_call(os.listdir, self._real(path))]

    def mkdir(self, path: str, mode: int) -> int:
        _os_call(os.mkdir, self._real(path), mode)
        return 0

    def rmdir(self, path: str) -> int:
        _os_call(os.rmdir, self._real(path))
        return 0

    def create(self, path: str, mode: int, flags: int = 0) -> int:
        os.close(_os_call(os.open, self._real(path), os.O_WRONLY | os.O_CREAT, mode))
        return 0

    def open(self, path: str, flags: int) -> int:
        _os_call(os.lstat, self._real(path))
        return 0

    def release(self, path: str, fh: int) -> int:
        return 0

    def unlink(self, path: str) -> int:
        _os_call(os.unlink, self._real(path))
        with self._lock:
            self._forget(path)
        return 0

    def rename(self, old: str, new: str) -> int:
        _os_call(os.rename, self._real(old), self._real(new))
        with self._lock:
            self._forget(new)
            if old in self._pages:
                self._pages[new] = self._pages.pop(old)
            if old in self._sizes:
                self._sizes[new] = self._sizes.pop(old)
        return 0

    def chmod(self, path: str, mode: int) -> int:
        _os_call(os.chmod, self._real(path), mode)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        _os_call(os.utime, self._real(path), ns=times)
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._real(path))
        return {key: getattr(st, key) for key in (
            "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_namemax")}

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        _os_call(os.truncate, self._real(path), length)
        with self._lock:
            pages = self._pages.get(path, {})
            for index in [i for i in pages if i * PAGE >= length]:
                del pages[index]
            tail = pages.get(length // PAGE)
            if tail is not None:
                tail[length % PAGE:] = bytes(PAGE - length % PAGE)
            if path in self._sizes:
                self._sizes[path] = length
        return 0

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        return -errno.EOPNOTSUPP   # the store then sizes its files with ftruncate

    # -- data: volatile until fsync ------------------------------------------------------------

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._lock:
            pages = self._pages.setdefault(path, {})
            position = offset
            view = memoryview(data)
            while view:
                index, start = divmod(position, PAGE)
                page = pages.get(index)
                if page is None:
                    page = pages[index] = self._durable_page(path, index)
                count = min(PAGE - start, len(view))
                page[start:start + count] = view[:count]
                view = view[count:]
                position += count
            self._sizes[path] = max(self._sizes.get(path, 0), offset + len(data),
                                    self._backing_size(path))
        return len(data)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self._lock:
            end = min(offset + size, max(self._backing_size(path), self._sizes.get(path, 0)))
            if end <= offset:
                return b""
            with open(self._real(path), "rb") as file:
                file.seek(offset)
                data = bytearray(file.read(end - offset))
            data.extend(bytes(end - offset - len(data)))
            for index, page in self._pages.get(path, {}).items():
                lo, hi = max(index * PAGE, offset), min(index * PAGE + PAGE, end)
                if lo < hi:
                    data[lo - offset:hi - offset] = page[lo - index * PAGE:hi - index * PAGE]
            return bytes(data)

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        time.sleep(self.fsync_delay_s)   # the behaviour under test: a slow disk's fsync
        with self._lock:
            pages = self._pages.pop(path, {})
            size = max(self._sizes.pop(path, 0), self._backing_size(path))
            fd = _os_call(os.open, self._real(path), os.O_WRONLY)
            try:
                for index, page in sorted(pages.items()):
                    start = index * PAGE
                    if start < size:
                        os.pwrite(fd, page[:size - start], start)
                if os.fstat(fd).st_size < size:
                    os.ftruncate(fd, size)
                os.fsync(fd)
            finally:
                os.close(fd)
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0     # close(2) does not make data durable

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        return 0     # metadata is durable at once in this model

    # -- helpers ----------------------------------------------------------------------------

    def _durable_page(self, path: str, index: int) -> bytearray:
        with open(self._real(path), "rb") as file:
            file.seek(index * PAGE)
            page = bytearray(file.read(PAGE))
        page.extend(bytes(PAGE - len(page)))
        return page

    def _backing_size(self, path: str) -> int:
        return os.stat(self._real(path)).st_size

    def _forget(self, path: str) -> None:
        self._pages.pop(path, None)
        self._sizes.pop(path, None)


def _os_call(function, *args, **kwargs):
    """Run an os call, turning its OSError into the errno FUSE answers with."""
    from mfusepy import FuseOSError

    try:
        return function(*args, **kwargs)
    except OSError as error:
        raise FuseOSError(error.errno or errno.EIO) from None


class VolatileDisk:
    """A LazyFS mount of `backing` at `mountpoint` in its own process, for one test."""

    def __init__(self, backing: Path, mountpoint: Path, log_path: Path, fsync_delay_s: float = 0.0) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.log_path = log_path
        self.fsync_delay_s = fsync_delay_s
        self.process: subprocess.Popen | None = None
        self.power_cuts = 0

    def mount(self) -> VolatileDisk:
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "integration_tests.reliability.lazyfs",
                 str(self.backing), str(self.mountpoint), str(self.fsync_delay_s)],
                stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2])
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not os.path.ismount(self.mountpoint):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self._detach()
                raise OSError(f"LazyFS did not mount {self.mountpoint}: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.05)
        return self

    def power_off(self) -> None:
        """Lose every byte not fsync'd: kill the filesystem process and detach its mount
        (the kernel drops the mount's page cache with it). Stop the writers first."""
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self._detach()
        self.power_cuts += 1

    def unmount(self) -> None:
        """Clean unmount (unsynced data is lost here too: nothing flushes it)."""
        if self.process is not None and self.process.poll() is None:
            subprocess.run(["fusermount3", "-u", str(self.mountpoint)], capture_output=True, check=False)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._detach()

    def _detach(self) -> None:
        """Lazy unmount; also of a mount whose process died ("transport endpoint is not
        connected", which os.path.ismount cannot see)."""
        subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], capture_output=True, check=False)
        self.process = None


def mounted_or_skip(tmp_path: Path, mountpoint: Path, fsync_delay_s: float = 0.0) -> VolatileDisk:
    """A LazyFS mount at `mountpoint` (backing dir and log in tmp_path); pytest.skip with the
    reason where FUSE cannot mount."""
    import pytest

    reason = fuse_unavailable_reason()
    if reason is not None:
        pytest.skip(f"needs FUSE: {reason}")
    disk = VolatileDisk(tmp_path / "durable", mountpoint, tmp_path / "lazyfs.log", fsync_delay_s)
    try:
        return disk.mount()
    except OSError as error:
        pytest.skip(f"needs FUSE: {error}")


def main(argv: list[str]) -> None:
    from mfusepy import FUSE

    backing, mountpoint, *delay = argv
    operations = LazyFS(Path(backing).resolve(), float(delay[0]) if delay else 0.0)
    FUSE(operations, mountpoint, foreground=True, nothreads=False)


if __name__ == "__main__":
    main(sys.argv[1:])
