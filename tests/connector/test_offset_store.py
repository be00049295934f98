"""OffsetStore semantics (spec consumption §14) with the LocalFileOffsetStore; the broker
store is exercised against a real broker in integration_tests/test_spark_source_offsets.py."""

from __future__ import annotations

import json

from rmq.connector.client import MessageQueue
from rmq.connector.offset_store import LocalFileOffsetStore, ReadOffsetType

Q0, Q1 = MessageQueue("t", "broker-a", 0), MessageQueue("t", "broker-a", 1)


def test_update_is_in_memory_until_persist_all(tmp_path):
    store = LocalFileOffsetStore(tmp_path, "g")
    store.update_offset(Q0, 42, increase_only=True)
    assert store.read_offset(Q0, ReadOffsetType.READ_FROM_MEMORY) == 42
    assert store.read_offset(Q0, ReadOffsetType.READ_FROM_STORE) == -1      # not persisted yet
    store.persist_all([Q0])
    assert store.read_offset(Q0, ReadOffsetType.READ_FROM_STORE) == 42
    assert json.loads((tmp_path / "g" / "offsets.json").read_text()) == {"t": {"broker-a": {"0": 42}}}


def test_increase_only_never_moves_back(tmp_path):
    store = LocalFileOffsetStore(tmp_path, "g")
    store.update_offset(Q0, 42, increase_only=True)
    store.update_offset(Q0, 10, increase_only=True)
    assert store.read_offset(Q0, ReadOffsetType.READ_FROM_MEMORY) == 42
    store.update_offset(Q0, 10, increase_only=False)
    assert store.read_offset(Q0, ReadOffsetType.READ_FROM_MEMORY) == 10


def test_read_types_and_remove_offset(tmp_path):
    store = LocalFileOffsetStore(tmp_path, "g")
    store.update_offset(Q1, 7, increase_only=False)
    store.persist_all([Q1])
    store.remove_offset(Q1)
    assert store.read_offset(Q1, ReadOffsetType.READ_FROM_MEMORY) == -1
    assert store.read_offset(Q1, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 7   # falls through to the file
    assert store.read_offset(Q1, ReadOffsetType.READ_FROM_MEMORY) == 7          # and is cached again
    assert store.read_offset(Q0, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == -1


def test_persist_all_writes_only_the_given_queues_and_keeps_saved_ones(tmp_path):
    store = LocalFileOffsetStore(tmp_path, "g")
    store.update_offset(Q0, 1, increase_only=False)
    store.update_offset(Q1, 2, increase_only=False)
    store.persist_all([Q0])
    assert LocalFileOffsetStore(tmp_path, "g").read_offset(Q1, ReadOffsetType.READ_FROM_STORE) == -1
    store.persist_all([Q1])
    reloaded = LocalFileOffsetStore(tmp_path, "g")
    reloaded.load()
    assert reloaded.read_offset(Q0, ReadOffsetType.READ_FROM_MEMORY) == 1
    assert reloaded.read_offset(Q1, ReadOffsetType.READ_FROM_MEMORY) == 2


def test_a_broken_file_falls_back_to_the_backup(tmp_path):
    store = LocalFileOffsetStore(tmp_path, "g")
    store.update_offset(Q0, 5, increase_only=False)
    store.persist_all([Q0])
    store.update_offset(Q0, 9, increase_only=False)
    store.persist_all([Q0])                        # the previous version becomes offsets.json.bak
    (tmp_path / "g" / "offsets.json").write_text('{"t": {"broker-a": {"0": ')   # torn write
    reloaded = LocalFileOffsetStore(tmp_path, "g")
    reloaded.load()
    assert reloaded.read_offset(Q0, ReadOffsetType.READ_FROM_MEMORY) == 5


def test_an_offset_only_read_is_not_written_back_over_a_later_one(tmp_path):
    """A queue handed over while its owner shuts down: the new owner read 5, the old owner then
    stored 9; the new owner's persist_all must not put 5 back (it never consumed)."""
    owner, taker = LocalFileOffsetStore(tmp_path, "g"), LocalFileOffsetStore(tmp_path, "g")
    owner.update_offset(Q0, 5, increase_only=False)
    owner.persist_all([Q0])
    assert taker.read_offset(Q0, ReadOffsetType.READ_FROM_STORE) == 5
    owner.update_offset(Q0, 9, increase_only=False)
    owner.persist_all([Q0])
    taker.persist_all([Q0])
    assert LocalFileOffsetStore(tmp_path, "g").read_offset(Q0, ReadOffsetType.READ_FROM_STORE) == 9
    taker.update_offset(Q0, 12, increase_only=True)     # once it consumes, its offset is written
    taker.persist_all([Q0])
    assert LocalFileOffsetStore(tmp_path, "g").read_offset(Q0, ReadOffsetType.READ_FROM_STORE) == 12
