"""ConsumeQueue#recover reads its files in chunks up to the first invalid entry (a start-up with
thousands of barely used queues no longer reads each 6 MB file whole): the recovered max offset
and the last entry's end are the same wherever the end falls relative to the chunks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rmq.store.config import CQ_STORE_UNIT_SIZE
from rmq.store.consume_queue import CQ_DTYPE, PREALLOCATE_STEP, RECOVER_CHUNK_ENTRIES, ConsumeQueue

FILE_ENTRIES = 3 * RECOVER_CHUNK_ENTRIES + 7


def filled(root: Path, count: int) -> ConsumeQueue:
    cq = ConsumeQueue("T", 0, root, FILE_ENTRIES * CQ_STORE_UNIT_SIZE)
    entries = np.zeros(count, dtype=CQ_DTYPE)
    entries["offset"] = np.arange(count) * 100
    entries["size"] = 100
    cq.put_entries(entries, 0)
    cq.close()
    return cq


CHUNK = RECOVER_CHUNK_ENTRIES


COUNTS = [1, CHUNK - 1, CHUNK, CHUNK + 1, FILE_ENTRIES, FILE_ENTRIES + 5, 2 * FILE_ENTRIES]


@pytest.mark.parametrize("count", COUNTS)
def test_recover_finds_the_end_across_chunks_and_files(tmp_path: Path, count: int) -> None:
    filled(tmp_path, count)
    cq = ConsumeQueue("T", 0, tmp_path, FILE_ENTRIES * CQ_STORE_UNIT_SIZE)
    cq.load()
    cq.recover()
    assert cq.get_max_offset_in_queue() == count
    assert cq.max_physic_offset == count * 100
    assert cq.get_entry(count - 1) == ((count - 1) * 100, 100, 0)
    cq.close()


def test_a_queue_file_reserves_blocks_a_step_ahead_of_its_entries(tmp_path: Path) -> None:
    """An idle queue's 6 MB file reserves one step of disk, not 6 MB; blocks follow the writes
    (reserved before each write passes them, so a full disk is an OSError, not a SIGBUS)."""
    size = 300_000 * CQ_STORE_UNIT_SIZE
    cq = ConsumeQueue("T", 0, tmp_path, size)
    cq.put_entries(_entry(0), 0)
    path = tmp_path / "T" / "0" / f"{0:020d}"
    assert path.stat().st_size == size
    assert path.stat().st_blocks * 512 <= PREALLOCATE_STEP + 4096
    many = np.zeros(20_000, dtype=CQ_DTYPE)
    many["offset"], many["size"] = np.arange(1, 20_001) * 100, 100
    cq.put_entries(many, 1)
    assert 20_001 * CQ_STORE_UNIT_SIZE <= path.stat().st_blocks * 512 <= 20_001 * CQ_STORE_UNIT_SIZE + \
        PREALLOCATE_STEP + 4096
    cq.close()


def _entry(offset: int) -> np.ndarray:
    entry = np.zeros(1, dtype=CQ_DTYPE)
    entry["offset"], entry["size"] = offset, 100
    return entry
