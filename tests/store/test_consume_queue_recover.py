"""ConsumeQueue#recover reads its files in chunks up to the first invalid entry (a start-up with
thousands of barely used queues no longer reads each 6 MB file whole): the recovered max offset
and the last entry's end are the same wherever the end falls relative to the chunks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rmq.store.config import CQ_STORE_UNIT_SIZE
from rmq.store.consume_queue import CQ_DTYPE, RECOVER_CHUNK_ENTRIES, ConsumeQueue

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
