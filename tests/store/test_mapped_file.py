"""MappedFile and MappedFileQueue (spec store §5; TV6, TV7, TV8, TV9, TV10)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from rmq.store import StoreError
from rmq.store.mapped_file import MappedFile, offset_to_file_name
from rmq.store.mapped_file_queue import MappedFileQueue


def make_queue(path: Path, starts: list[int], size: int = 1024) -> MappedFileQueue:
    queue = MappedFileQueue(path, size)
    for start in starts:
        queue.create_file(start).wrote_position = size
    return queue


def test_file_names_are_20_digit_offsets() -> None:
    assert offset_to_file_name(0) == "00000000000000000000"
    assert offset_to_file_name(1073741824) == "00000000001073741824"


def test_tv6_find_mapped_file_by_offset(tmp_path: Path) -> None:
    queue = make_queue(tmp_path, [2048, 3072, 4096])
    find = queue.find_mapped_file_by_offset
    assert find(3500).file_from_offset == 3072
    assert find(4096).file_from_offset == 4096
    assert find(5119).file_from_offset == 4096
    assert find(2047) is None and find(5120) is None
    assert find(2047, return_first_on_not_found=True).file_from_offset == 2048
    assert find(5120, return_first_on_not_found=True).file_from_offset == 2048
    assert queue.get_min_offset() == 2048
    queue.files[-1].wrote_position = 10
    assert queue.get_max_offset() == 4106
    queue.close()


def test_tv6_empty_queue_offsets(tmp_path: Path) -> None:
    queue = MappedFileQueue(tmp_path, 1024)
    assert queue.get_min_offset() == -1 and queue.get_max_offset() == 0
    assert queue.find_mapped_file_by_offset(0, True) is None


@pytest.mark.parametrize(("flushed", "wrote", "least_pages", "expected"), [
    (0, 16384, 4, True),
    (0, 16383, 4, False),
    (4095, 16384, 4, True),
    (0, 1, 0, True),
    (500, 500, 0, False),
])
def test_tv7_is_able_to_flush(tmp_path: Path, flushed: int, wrote: int, least_pages: int,
                              expected: bool) -> None:
    mapped = MappedFile(tmp_path / offset_to_file_name(0), 65536, create=True)
    mapped.wrote_position, mapped.flushed_position = wrote, flushed
    assert mapped.is_able_to_flush(least_pages) is expected
    mapped.close()


def test_tv7_full_file_always_flushes(tmp_path: Path) -> None:
    mapped = MappedFile(tmp_path / offset_to_file_name(0), 65536, create=True)
    mapped.wrote_position, mapped.flushed_position = 65536, 65000
    assert mapped.is_able_to_flush(4)
    assert mapped.flush(4) == 65536
    mapped.close()


def test_tv8_select_mapped_buffer(tmp_path: Path) -> None:
    mapped = MappedFile(tmp_path / offset_to_file_name(1024), 1024, create=True)
    mapped.append(bytes(range(200)) + bytes(100))
    start, data = mapped.select_mapped_buffer(100)
    assert (start, len(data), data[:3]) == (1124, 200, bytes([100, 101, 102]))
    assert mapped.select_mapped_buffer(300) is None and mapped.select_mapped_buffer(-1) is None
    assert mapped.select_mapped_buffer(290, 50) == (1314, bytes(10))
    mapped.close()


def test_tv8_read_position_is_wrote_position(tmp_path: Path) -> None:
    mapped = MappedFile(tmp_path / offset_to_file_name(1024), 1024, create=True)
    assert mapped.append(b"x" * 500)
    assert mapped.read_position() == 500 and mapped.committed_position == 500
    assert not mapped.append(b"y" * 600)   # does not fit: nothing written
    assert mapped.read_position() == 500
    mapped.close()


def test_tv9_destroy_waits_for_readers_then_forces(tmp_path: Path) -> None:
    path = tmp_path / offset_to_file_name(0)
    mapped = MappedFile(path, 4096, create=True)
    assert mapped.hold() and mapped.hold()
    assert not mapped.destroy(interval_forcibly_ms=60_000)   # two readers hold it
    assert path.exists() and not mapped.hold()               # no new readers once shut down
    assert mapped._ref_count == 2
    time.sleep(0.002)   # not an event: the 1 ms forcible interval (measured on the real clock) passes
    assert mapped.destroy(interval_forcibly_ms=1)            # forced: refCount = -1000 - 2
    assert not path.exists()
    assert mapped._ref_count == -1003


def test_destroy_after_last_reader_releases(tmp_path: Path) -> None:
    path = tmp_path / offset_to_file_name(0)
    mapped = MappedFile(path, 4096, create=True)
    assert mapped.hold()
    assert not mapped.destroy(60_000)
    mapped.release()
    assert mapped.destroy(60_000) and not path.exists()


def test_tv10_truncate_dirty_files(tmp_path: Path) -> None:
    queue = make_queue(tmp_path, [0, 1024, 2048])
    queue.files[1].write(476, b"\xff" * 100)
    queue.truncate_dirty_files(1500)
    assert [f.file_from_offset for f in queue.files] == [0, 1024]
    assert queue.files[0].wrote_position == 1024
    second = queue.files[1]
    assert (second.wrote_position, second.committed_position, second.flushed_position) == (476, 476, 476)
    assert second.read(476, 100) == bytes(100)       # the torn tail is gone
    assert queue.get_max_offset() == 1500
    assert not (tmp_path / offset_to_file_name(2048)).exists()
    queue.close()


def test_get_mapped_file_by_time(tmp_path: Path) -> None:
    queue = make_queue(tmp_path, [0, 1024, 2048])
    for index, mapped in enumerate(queue.files):
        os.utime(mapped.path, (1000 * (index + 1), 1000 * (index + 1)))
    assert queue.get_mapped_file_by_time(1_500_000).file_from_offset == 1024
    assert queue.get_mapped_file_by_time(10_000_000).file_from_offset == 2048
    queue.close()


def test_load_refuses_foreign_and_wrong_sized_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(StoreError, match="notes.txt: not a store file"):
        MappedFileQueue(tmp_path, 1024).load()
    (tmp_path / "notes.txt").unlink()
    (tmp_path / offset_to_file_name(0)).write_bytes(bytes(1000))
    (tmp_path / offset_to_file_name(1024)).write_bytes(bytes(1024))
    with pytest.raises(StoreError, match="size 1000 differs from the configured file size 1024"):
        MappedFileQueue(tmp_path, 1024).load()


def test_load_extends_a_short_last_file(tmp_path: Path) -> None:
    (tmp_path / offset_to_file_name(0)).write_bytes(bytes(1024))
    (tmp_path / offset_to_file_name(1024)).write_bytes(bytes(10))
    queue = MappedFileQueue(tmp_path, 1024)
    queue.load()
    assert (tmp_path / offset_to_file_name(1024)).stat().st_size == 1024
    assert queue.get_max_offset() == 2048    # positions start full; recovery fixes them
    queue.close()
