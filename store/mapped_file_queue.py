"""MappedFileQueue: a directory of equally sized MappedFiles forming one offset space (spec store §5.1).

The file list is copy-on-write: writers replace `self.files`, readers take a local reference.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rmq.store.errors import StoreError
from rmq.store.mapped_file import FILE_NAME_DIGITS, MappedFile, now_ms, offset_to_file_name
from rmq.store.mapped_file_lru import MappedFileLru
from rmq.store.private_files import make_dirs

DELETE_FILES_BATCH_MAX = 10


KEEP_NOTHING = 1 << 62   # delete_expired_file_by_time: no offset needs keeping

class MappedFileQueue:
    def __init__(self, store_path: Path, mapped_file_size: int, *, preallocate: bool = False,
                 preallocate_step: int = 0, lru: MappedFileLru | None = None) -> None:
        """`lru`: the files' mappings are bounded by it (ConsumeQueues; see MappedFileLru)."""
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.preallocate = preallocate
        self.preallocate_step = preallocate_step
        self.lru = lru
        self.files: list[MappedFile] = []
        self.flushed_where = 0
        self.store_timestamp = 0

    # -- load --------------------------------------------------------------------------------

    def load(self) -> None:
        """Map every file (spec store §9.1). Names must be 20-digit offsets of this file size;
        only the last file may be short (a crash while creating it), and is extended."""
        if not self.store_path.is_dir():
            return
        paths = sorted(self.store_path.iterdir())
        files: list[MappedFile] = []
        for index, path in enumerate(paths):
            self._check_file(path, files[-1] if files else None, is_last=index == len(paths) - 1)
            mapped = MappedFile(path, self.mapped_file_size, preallocate_step=self.preallocate_step,
                                lru=self.lru)
            mapped.set_positions(self.mapped_file_size)
            files.append(mapped)
        self.files = files

    def _check_file(self, path: Path, previous: MappedFile | None, *, is_last: bool) -> None:
        name = path.name
        if not (path.is_file() and len(name) == FILE_NAME_DIGITS and name.isdigit()):
            raise StoreError(f"{path}: not a store file (expected a file named by a 20-digit offset)")
        if int(name) % self.mapped_file_size:
            raise StoreError(f"{path}: offset {int(name)} is not a multiple of the file size "
                             f"{self.mapped_file_size}")
        size = path.stat().st_size
        if size > self.mapped_file_size or (size < self.mapped_file_size and not is_last):
            raise StoreError(f"{path}: size {size} differs from the configured file size "
                             f"{self.mapped_file_size}")
        if previous is not None and int(name) != previous.file_from_offset + self.mapped_file_size:
            raise StoreError(f"{path}: gap in the file sequence before this file")

    # -- lookup ------------------------------------------------------------------------------

    def first_file(self) -> MappedFile | None:
        files = self.files
        return files[0] if files else None

    def last_file(self) -> MappedFile | None:
        files = self.files
        return files[-1] if files else None

    def get_last_mapped_file(self, start_offset: int = 0) -> MappedFile:
        """The file being written, creating the next one when there is none or it is full."""
        last = self.last_file()
        if last is not None and not last.is_full():
            return last
        if last is None:
            create_offset = start_offset - start_offset % self.mapped_file_size
        else:
            create_offset = last.file_from_offset + self.mapped_file_size
        return self.create_file(create_offset)

    def create_file(self, offset: int) -> MappedFile:
        make_dirs(self.store_path)
        mapped = MappedFile(self.store_path / offset_to_file_name(offset), self.mapped_file_size,
                            create=True, preallocate=self.preallocate, preallocate_step=self.preallocate_step,
                            lru=self.lru)
        self.files = [*self.files, mapped]
        return mapped

    def find_mapped_file_by_offset(self, offset: int, return_first_on_not_found: bool = False
                                   ) -> MappedFile | None:
        """findMappedFileByOffset (spec store §5.1, TV6)."""
        files = self.files
        if not files:
            return None
        first, last = files[0], files[-1]
        size = self.mapped_file_size
        if first.file_from_offset <= offset < last.file_from_offset + size:
            index = offset // size - first.file_from_offset // size
            if 0 <= index < len(files):
                target = files[index]
                if target.file_from_offset <= offset < target.file_from_offset + size:
                    return target
            for target in files:
                if target.file_from_offset <= offset < target.file_from_offset + size:
                    return target
        return first if return_first_on_not_found else None

    def get_mapped_file_by_time(self, timestamp_ms: int) -> MappedFile | None:
        files = self.files
        for mapped in files:
            if mapped.last_modified_timestamp() >= timestamp_ms:
                return mapped
        return files[-1] if files else None

    def get_min_offset(self) -> int:
        first = self.first_file()
        return first.file_from_offset if first is not None else -1

    def get_max_offset(self) -> int:
        files = self.files   # (last_file and read_position inline: a put's dispatch asks once per put)
        return files[-1].file_from_offset + files[-1].wrote_position if files else 0

    def roll_next_file(self, offset: int) -> int:
        return offset + self.mapped_file_size - offset % self.mapped_file_size

    # -- flush -------------------------------------------------------------------------------

    def flush(self, least_pages: int) -> bool:
        """Flush from flushed_where on, across completed files; True when something was flushed."""
        flushed = False
        while True:
            mapped = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
            if mapped is None:
                return flushed
            timestamp = mapped.store_timestamp
            where = mapped.file_from_offset + mapped.flush(least_pages)
            if where == self.flushed_where:
                return flushed
            self.flushed_where = where
            flushed = True
            if timestamp and where >= mapped.file_from_offset + mapped.read_position():
                self.store_timestamp = timestamp
            if where < mapped.file_from_offset + self.mapped_file_size:
                return flushed

    # -- truncate / delete ---------------------------------------------------------------------

    def set_flushed_where(self, offset: int) -> None:
        self.flushed_where = offset

    def truncate_dirty_files(self, offset: int) -> None:
        """Drop everything after `offset` (spec store §9.3, TV10)."""
        keep: list[MappedFile] = []
        for mapped in self.files:
            tail = mapped.file_from_offset + self.mapped_file_size
            if tail <= offset:
                keep.append(mapped)
            elif offset >= mapped.file_from_offset:
                position = offset - mapped.file_from_offset
                mapped.set_positions(position)
                mapped.clear_from(position)
                keep.append(mapped)
            else:
                mapped.destroy(1000)
        self.files = keep

    def delete_expired_file_by_time(self, expired_time_ms: float, delete_files_interval_ms: int,
                                    interval_forcibly_ms: int, clean_immediately: bool,
                                    keep_from: int = KEEP_NOTHING) -> int:
        """deleteExpiredFileByTime (spec store §11, TV15): oldest first, never the last file,
        stop at the first file that is not expired or still held, at most 10 per run, and at the
        first reaching past `keep_from` (an offset still needed: a pending timer message)."""
        candidates = self.files[:-1]
        deleted: list[MappedFile] = []
        for index, mapped in enumerate(candidates):
            live_max = mapped.last_modified_timestamp() + expired_time_ms
            if not (now_ms() >= live_max or clean_immediately):
                break
            if mapped.file_from_offset + mapped.file_size > keep_from:
                break
            if not mapped.destroy(interval_forcibly_ms):
                break
            deleted.append(mapped)
            if len(deleted) >= DELETE_FILES_BATCH_MAX:
                break
            if delete_files_interval_ms > 0 and index + 1 < len(candidates):
                time.sleep(delete_files_interval_ms / 1000)
        self._remove(deleted)
        return len(deleted)

    def delete_files_below(self, predicate: Callable[[MappedFile], bool], interval_forcibly_ms: int) -> int:
        """Delete leading files (never the last) for which predicate(file) holds."""
        deleted: list[MappedFile] = []
        for mapped in self.files[:-1]:
            if not predicate(mapped) or not mapped.destroy(interval_forcibly_ms):
                break
            deleted.append(mapped)
        self._remove(deleted)
        return len(deleted)

    def _remove(self, deleted: list[MappedFile]) -> None:
        if deleted:
            gone = {id(m) for m in deleted}
            self.files = [m for m in self.files if id(m) not in gone]

    def destroy(self) -> None:
        for mapped in self.files:
            mapped.destroy(0)
        self.files = []
        self.flushed_where = 0
        if self.store_path.is_dir():
            try:
                self.store_path.rmdir()
            except OSError:
                pass

    def close(self) -> None:
        for mapped in self.files:
            mapped.close()
