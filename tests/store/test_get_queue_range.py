"""getQueueRange: one read of the Flight data plane (docs/data-plane.md) is getMessage bounded by
the range's end: it never scans an entry at or past the end, and answers every other case with
getMessage's statuses and nextBeginOffset corrections."""

from __future__ import annotations

import numpy as np
import pytest

from rmq import message_format as mf
from rmq.record_batch import HEAD_COLUMNS, CorruptRecordsError, decode_heads, decode_records
from rmq.store import GetMessageStatus
from tests.store.conftest import message, wait_dispatched
from tests.store.test_get_message import BODY_700, five_to_ten, queue_offsets

S = GetMessageStatus


def test_a_read_stops_at_the_end_of_the_range(open_store) -> None:
    store = open_store()
    store.put_messages([message(body=bytes([i])) for i in range(20)])
    wait_dispatched(store)
    result = store.get_queue_range("TopicTest", 0, 4, 9, 32)
    assert result.status is S.FOUND and queue_offsets(result) == [4, 5, 6, 7, 8]
    assert result.next_begin_offset == 9 and (result.min_offset, result.max_offset) == (0, 20)
    assert store.get_queue_range("TopicTest", 0, 4, 9, 2).next_begin_offset == 6   # rows per read still bound


def test_a_filtered_scan_ends_at_the_end_of_the_range_not_past_it(open_store) -> None:
    store = open_store()
    store.put_messages([message(body=bytes([i]), TAGS="TagA" if i % 3 == 0 else "TagB") for i in range(12)])
    wait_dispatched(store)
    tag_a = {mf.tags_hash_code("TagA")}
    result = store.get_queue_range("TopicTest", 0, 0, 7, 32, tag_codes=tag_a)
    assert queue_offsets(result) == [0, 3, 6] and result.next_begin_offset == 7
    none = store.get_queue_range("TopicTest", 0, 1, 3, 32, tag_codes=tag_a)
    assert (none.status, none.next_begin_offset, none.message_count) == (S.NO_MATCHED_MESSAGE, 3, 0)
    tag_b = lambda record: record[-5:-1] == b"TagB"   # noqa: E731  (the properties end the record)
    sql = store.get_queue_range("TopicTest", 0, 0, 12, 32, record_filter=tag_b)
    assert queue_offsets(sql)[:3] == [1, 2, 4]


@pytest.mark.parametrize(("start", "end", "status", "next_begin"), [
    (3, 8, S.OFFSET_TOO_SMALL, 5),         # retention took 0-4
    (10, 12, S.OFFSET_OVERFLOW_ONE, 10),
    (12, 20, S.OFFSET_OVERFLOW_BADLY, 10),
    (7, 20, S.FOUND, 10),                  # the queue ends before the range
])
def test_statuses_and_corrections_are_get_messages(open_store, start, end, status, next_begin) -> None:
    store = five_to_ten(open_store)
    result = store.get_queue_range("TopicTest", 0, start, end, 32)
    assert (result.status, result.next_begin_offset, result.min_offset, result.max_offset) == (
        status, next_begin, 5, 10)


def test_unknown_queue_and_removed_records(open_store) -> None:
    store = open_store(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=20 * 64)
    assert store.get_queue_range("Nope", 3, 0, 5, 32).status is S.NO_MATCHED_LOGIC_QUEUE
    store.put_messages([message(body=BODY_700) for _ in range(10)])
    wait_dispatched(store)
    queue = store.commit_log.mapped_file_queue
    assert queue.delete_expired_file_by_time(0, 0, 0, clean_immediately=True) == 1   # CommitLog only
    removing = store.get_queue_range("TopicTest", 0, 0, 3, 32)
    assert (removing.status, removing.next_begin_offset) == (S.MESSAGE_WAS_REMOVING, 3)
    found = store.get_queue_range("TopicTest", 0, 5, 10, 32)
    assert (found.status, found.message_count, found.next_begin_offset) == (S.FOUND, 5, 10)


def test_records_are_gathered_across_commit_log_file_ends(open_store) -> None:
    """Records of 800 bytes in 4 KiB CommitLog files, three queues interleaved: a range spans files."""
    store = open_store(mapped_file_size_commit_log=4096)
    store.put_messages([message(queue_id=i % 3, body=BODY_700) for i in range(30)])
    wait_dispatched(store)
    assert len(store.commit_log.mapped_file_queue.files) > 3
    result = store.get_queue_range("TopicTest", 1, 2, 9, 32)
    assert queue_offsets(result) == list(range(2, 9)) and result.next_begin_offset == 9
    assert int(result.sizes.sum()) == len(result.buffer) == 7 * 800


def test_an_empty_range_is_a_caller_error(open_store) -> None:
    store = open_store()
    with pytest.raises(ValueError, match=r"empty queue range \[5, 5\)"):
        store.get_queue_range("TopicTest", 0, 5, 5, 32)


def _whole_records(result) -> list[bytes]:
    records, position = [], 0
    for size in result.sizes.tolist():
        records.append(bytes(result.buffer[position:position + size]))
        position += size
    return records


@pytest.mark.parametrize("lengths", [
    [100] * 12,                        # one length: one row gather
    [90, 100, 110, 95, 0, 105] * 2,    # close lengths: padded gather, padding dropped
    [3, 2, 1700, 4, 0, 5] * 2,         # one long body: a slice per body
], ids=["one-length", "padded", "slices"])
def test_heads_are_each_records_header_and_body_across_file_ends(open_store, lengths) -> None:
    """A heads-only read answers what the whole records hold up to their bodies' ends, record by
    record, across CommitLog file ends (4 KiB files, two queues interleaved)."""
    store = open_store(mapped_file_size_commit_log=4096)
    store.put_messages([message(queue_id=i % 2, body=bytes([i]) * length, KEYS="k")
                        for i, length in enumerate(lengths * 2)])
    wait_dispatched(store)
    assert len(store.commit_log.mapped_file_queue.files) >= 2
    whole = store.get_queue_range("TopicTest", 1, 0, 12, 32)
    heads = store.get_queue_range("TopicTest", 1, 0, 12, 32, heads_only=True)
    assert (heads.status, heads.next_begin_offset, heads.message_count) == (S.FOUND, 12, 12)
    assert heads.buffer == b"" and heads.heads is not None and (heads.sizes == whole.sizes).all()
    offsets = heads.heads.body_offsets.tolist()
    for i, record in enumerate(_whole_records(whole)):
        body_end = mf.BODY_POS + int.from_bytes(record[mf.BODY_LENGTH_POS:mf.BODY_POS], "big")
        assert heads.heads.headers[i].tobytes() == record[:mf.BODY_POS]
        assert heads.heads.bodies[offsets[i]:offsets[i + 1]].tobytes() == record[mf.BODY_POS:body_end]
    assert heads.byte_count == heads.heads.byte_count < len(whole.buffer)


def test_heads_never_hold_more_bytes_than_the_records_they_come_from(open_store) -> None:
    """A read granted its records' bytes (the Flight budget) holds no more as heads, even for
    records with a one-character topic, no properties and empty bodies (92 bytes each)."""
    store = open_store()
    store.put_messages([message(topic="t", body=b"") for _ in range(5)])
    wait_dispatched(store)
    whole = store.get_queue_range("t", 0, 0, 5, 32)
    heads = store.get_queue_range("t", 0, 0, 5, 32, heads_only=True)
    assert int(whole.sizes.sum()) == len(whole.buffer) == 5 * (mf.FIXED_OVERHEAD + 1)
    assert heads.byte_count <= len(whole.buffer)


def test_decoded_heads_are_the_decoded_records_and_a_bad_body_length_is_refused(open_store) -> None:
    """decode_heads gives the header columns and the body decode_records gives; a record whose body
    length passes its size (gathered clipped to the record) is refused, not answered short."""
    store = open_store()
    store.put_messages([message(body=bytes([i]) * (50 + i), TAGS="t") for i in range(6)])
    wait_dispatched(store)
    whole = store.get_queue_range("TopicTest", 0, 0, 6, 32)
    heads = store.get_queue_range("TopicTest", 0, 0, 6, 32, heads_only=True).heads
    columns = sorted(HEAD_COLUMNS)
    records, sizes = np.frombuffer(whole.buffer, np.uint8), whole.sizes.astype(np.int64)

    def decoded(names: list[str]):
        return decode_heads(heads.sizes, heads.headers, heads.body_offsets, heads.bodies, "b", names)

    assert decoded(columns).equals(decode_records(records, sizes, "b", columns))
    heads.headers[2, mf.BODY_LENGTH_POS:mf.BODY_POS] = np.frombuffer((5000).to_bytes(4, "big"), np.uint8)
    with pytest.raises(CorruptRecordsError, match="corrupt record #2: body length out of range"):
        decoded(["queue_offset", "body"])
    with pytest.raises(ValueError, match=r"\['tags'\] are not in the records' heads"):
        decoded(["body", "tags"])
