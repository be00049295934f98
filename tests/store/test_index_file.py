"""IndexFile layout (spec store §7, TV24)."""

from __future__ import annotations

import struct
from pathlib import Path

from rmq.store.index_file import IndexFile, index_file_size, key_hash


def test_tv24_slot_and_entry_positions_with_rocketmq_defaults(tmp_path: Path) -> None:
    assert index_file_size(5_000_000, 20_000_000) == 420000040
    index_file = IndexFile(tmp_path / "20260101000000000", 5_000_000, 20_000_000)   # sparse file
    try:
        assert key_hash("TopicTest#KEY1") == 1656969516
        assert index_file.put_key("TopicTest#KEY1", 4242, 1_000_000)
        assert struct.unpack_from(">i", index_file.mm, 7878104) == (1,)
        assert struct.unpack_from(">iqii", index_file.mm, 20000060) == (1656969516, 4242, 0, 0)
        index_file.flush()
        header = struct.unpack_from(">qqqqii", index_file.mm, 0)
        assert header == (1_000_000, 1_000_000, 4242, 4242, 1, 2)
        assert (tmp_path / "20260101000000000").stat().st_size == 420000040
    finally:
        index_file.close()


def test_slot_chain_keeps_every_entry_for_a_key(tmp_path: Path) -> None:
    index_file = IndexFile(tmp_path / "20260101000000000", 4, 64)   # 4 slots: many collisions
    try:
        for offset in range(20):
            assert index_file.put_key(f"T#k{offset % 5}", offset * 100, 1_000_000 + offset * 1000)
        assert index_file.select_phy_offsets("T#k2", 10, 0, 2**62) == [1700, 1200, 700, 200]
        assert index_file.select_phy_offsets("T#k2", 2, 0, 2**62) == [1700, 1200]
        assert index_file.select_phy_offsets("T#k2", 10, 1_010_000, 2**62) == [1700, 1200]
        assert index_file.select_phy_offsets("T#nope", 10, 0, 2**62) == []
    finally:
        index_file.close()


def test_full_index_file_refuses_keys(tmp_path: Path) -> None:
    index_file = IndexFile(tmp_path / "20260101000000000", 4, 3)   # entries 1 and 2 (0 is unused)
    try:
        assert index_file.put_key("T#a", 1, 1) and index_file.put_key("T#b", 2, 1)
        assert not index_file.put_key("T#c", 3, 1)
    finally:
        index_file.close()
