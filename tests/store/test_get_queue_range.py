"""getQueueRange: one read of the Flight data plane (docs/data-plane.md) is getMessage bounded by
the range's end: it never scans an entry at or past the end, and answers every other case with
getMessage's statuses and nextBeginOffset corrections."""

from __future__ import annotations

import numpy as np
import pytest

from rmq import message_format as mf
from rmq.record_batch import (
    COLUMNS,
    HEAD_COLUMNS,
    TAIL_COLUMNS,
    CorruptRecordsError,
    decode_columns,
    decode_records,
    parts_of,
)
from rmq.record_columns import RecordParts, gather
from rmq.store import GetMessageStatus
from rmq.stored_message import decode_records as stored_records
from rmq.stored_message import offset_msg_id
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


def _put_interleaved(store, lengths: list[int]) -> None:
    """Two queues' records interleaved: bodies of `lengths`, properties of unequal lengths (none on
    every third record), across the store's small CommitLog files."""
    store.put_messages([message(queue_id=i % 2, body=bytes([i]) * length,
                                **({} if i % 3 == 0 else {"KEYS": "k" * (i % 7), "TAGS": f"t{i % 4}"}))
                        for i, length in enumerate(lengths * 2)])
    wait_dispatched(store)


LENGTHS = pytest.mark.parametrize("lengths", [
    [100] * 12,                        # one length: one row gather
    [90, 100, 110, 95, 0, 105] * 2,    # close lengths: padded gather, padding dropped
    [3, 2, 1700, 4, 0, 5] * 2,         # one long body: a slice per body
], ids=["one-length", "padded", "slices"])


@LENGTHS
@pytest.mark.parametrize("parts", list(RecordParts))
def test_columns_are_each_records_parts_across_file_ends(open_store, lengths, parts) -> None:
    """A column-wise read answers what the whole records hold, record by record, across CommitLog
    file ends (4 KiB files, two queues interleaved): the fixed header and body, and with the tails
    the topic and properties and their lengths as stored; never more bytes than the records."""
    store = open_store(mapped_file_size_commit_log=4096)
    _put_interleaved(store, lengths)
    assert len(store.commit_log.mapped_file_queue.files) >= 2
    whole = store.get_queue_range("TopicTest", 1, 0, 12, 32)
    read = store.get_queue_range("TopicTest", 1, 0, 12, 32, parts=parts)
    assert (read.status, read.next_begin_offset, read.message_count) == (S.FOUND, 12, 12)
    assert read.buffer == b"" and read.columns is not None and (read.sizes == whole.sizes).all()
    columns = read.columns
    assert (columns.tails is not None) is (parts is RecordParts.HEADS_AND_TAILS)
    for i, record in enumerate(_whole_records(whole)):
        body_end = mf.BODY_POS + int.from_bytes(record[mf.BODY_LENGTH_POS:mf.BODY_POS], "big")
        assert columns.headers[i].tobytes() == record[:mf.BODY_POS]
        assert _span(columns.bodies, i) == record[mf.BODY_POS:body_end]
        if columns.tails is not None:
            topic_end = body_end + 1 + record[body_end]
            properties = record[topic_end + 2:]
            assert (columns.tails.topic_lengths[i], _span(columns.tails.topics, i)) == (
                record[body_end], record[body_end + 1:topic_end])
            assert (columns.tails.properties_lengths[i], _span(columns.tails.properties, i)) == (
                len(properties), properties)
    assert read.byte_count == columns.byte_count <= len(whole.buffer)


def _span(spans, index: int) -> bytes:
    return spans.data[spans.offsets[index]:spans.offsets[index + 1]].tobytes()


@pytest.mark.parametrize("parts", list(RecordParts))
def test_columns_never_hold_more_bytes_than_the_records_they_come_from(open_store, parts) -> None:
    """A read granted its records' bytes (the Flight budget) holds no more column-wise, even for
    records with a one-character topic, no properties and empty bodies (92 bytes each)."""
    store = open_store()
    store.put_messages([message(topic="t", body=b"") for _ in range(5)])
    wait_dispatched(store)
    whole = store.get_queue_range("t", 0, 0, 5, 32)
    read = store.get_queue_range("t", 0, 0, 5, 32, parts=parts)
    assert int(whole.sizes.sum()) == len(whole.buffer) == 5 * (mf.FIXED_OVERHEAD + 1)
    assert read.byte_count <= len(whole.buffer)


def _expected_rows(whole, names: list[str]) -> list[dict]:
    """The rows of `names` decoded record by record in Python (rmq.stored_message): the oracle."""
    rows = []
    for stored in stored_records(bytes(whole.buffer), whole.sizes.tolist()):
        row = {"topic": stored.topic, "broker_name": "b", "queue_id": stored.queue_id,
               "queue_offset": stored.queue_offset, "msg_id": offset_msg_id(stored),
               "tags": stored.properties.get(mf.PROPERTY_TAGS),
               "keys": stored.properties.get(mf.PROPERTY_KEYS),
               "body": stored.body, "properties": list(stored.properties.items()),
               "born_timestamp": stored.born_timestamp, "store_timestamp": stored.store_timestamp}
        rows.append({name: row[name] for name in names})
    return rows


def _rows(batch) -> list[dict]:
    rows = batch.to_pylist()
    for row in rows:
        for name in ("born_timestamp", "store_timestamp"):
            if name in row:
                row[name] = int(row[name].timestamp() * 1000)
    return rows


@LENGTHS
def test_a_column_wise_read_decodes_as_its_records_do(open_store, lengths) -> None:
    """decode_columns of a column-wise read gives, for every column set (all, the heads only, the
    tails only, one column), the batch decode_records gives of the whole records and what a
    record-by-record decode gives, across CommitLog file ends."""
    store = open_store(mapped_file_size_commit_log=4096)
    _put_interleaved(store, lengths)
    whole = store.get_queue_range("TopicTest", 1, 0, 12, 32)
    records, sizes = np.frombuffer(whole.buffer, np.uint8), whole.sizes.astype(np.int64)
    for names in (list(COLUMNS), sorted(HEAD_COLUMNS), sorted(TAIL_COLUMNS), ["keys"], ["msg_id", "topic"],
                  ["queue_id", "queue_offset", "body"]):
        read = store.get_queue_range("TopicTest", 1, 0, 12, 32, parts=parts_of(names))
        batch = decode_columns(read.columns, "b", names)
        assert batch.equals(decode_records(records, sizes, "b", names)), names
        assert _rows(batch) == _expected_rows(whole, names), names


def _spread(whole) -> tuple[np.ndarray, np.ndarray]:
    """The records of a read laid out with 5 bytes of junk before each (as in the CommitLog, where
    other queues' records lie between them), and where each starts."""
    data, starts = bytearray(), []
    for record in _whole_records(whole):
        data += b"\xff" * 5
        starts.append(len(data))
        data += record
    return np.frombuffer(data, np.uint8).copy(), np.array(starts, dtype=np.int64)


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("body length", (5000).to_bytes(4, "big"), "corrupt record #2: body length out of range"),
    ("topic length", bytes([120]), "corrupt record #2: topic length out of range"),
    ("topic length", bytes([3]), "corrupt record #2: field lengths do not add up"),
    ("properties length", (40).to_bytes(2, "big"), "corrupt record #2: field lengths do not add up"),
    ("properties length", b"\xff\xff", "corrupt record #2: field lengths do not add up"),   # -1
    ("topic", b"\xff", "corrupt record #2: topic is not UTF-8"),
    ("properties", b"\xc3", "corrupt record #2: properties is not UTF-8"),
])
def test_corrupt_records_gathered_column_wise_are_refused(open_store, field, value, problem) -> None:
    """A record whose lengths do not fit it, or whose topic or properties are not UTF-8, is refused
    naming it, not answered short or read past (the gather clips every length to its record)."""
    store = open_store()
    store.put_messages([message(body=bytes([i]) * (50 + i), TAGS="t") for i in range(6)])
    wait_dispatched(store)
    whole = store.get_queue_range("TopicTest", 0, 0, 6, 32)
    data, starts = _spread(whole)
    sizes = whole.sizes.astype(np.int64)
    body_end = int(starts[2]) + mf.BODY_POS + 52
    position = {"body length": int(starts[2]) + mf.BODY_LENGTH_POS, "topic length": body_end,
                "properties length": body_end + 1 + len("TopicTest"), "topic": body_end + 1,
                "properties": body_end + 1 + len("TopicTest") + 2}[field]
    data[position:position + len(value)] = np.frombuffer(value, np.uint8)
    head_column = ["queue_offset", "body"] if field == "body length" else []
    for names in (list(COLUMNS), head_column + ["properties" if field == "properties" else "topic"]):
        columns = gather(data, starts, sizes, parts_of(names))
        with pytest.raises(CorruptRecordsError, match=problem):
            decode_columns(columns, "b", names)
    with pytest.raises(CorruptRecordsError, match=problem):   # the records back to back alike
        back_to_back = [data[start:start + size] for start, size in zip(starts, sizes, strict=True)]
        decode_records(np.concatenate(back_to_back), sizes, "b")


def test_heads_alone_do_not_decode_tail_columns(open_store) -> None:
    store = open_store()
    store.put_messages([message(body=b"x", TAGS="t") for _ in range(3)])
    wait_dispatched(store)
    read = store.get_queue_range("TopicTest", 0, 0, 3, 32, parts=RecordParts.HEADS)
    with pytest.raises(ValueError, match=r"\['tags'\] are not in the records' heads"):
        decode_columns(read.columns, "b", ["body", "tags"])
