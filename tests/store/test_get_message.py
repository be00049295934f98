"""getMessage: statuses, nextBeginOffset corrections, limits, tag filter, lookups
(spec consumer-pull-rebalance §12, consumption-longpolling-offsets §6, TV-4, store TV17)."""

from __future__ import annotations

import struct
import threading
import time

import numpy as np
import pytest

from rmq import message_format as mf
from rmq.store import DispatchRequest, FlushDiskType, GetMessageStatus, MessageStore
from rmq.store.config import BrokerRole
from tests.store.conftest import message, small_config, wait_dispatched

S = GetMessageStatus
BODY_700 = b"b" * 700    # record of 800 bytes: five fill one 4 KiB CommitLog file


def queue_offsets(result) -> list[int]:
    offsets, position = [], 0
    for size in result.sizes.tolist():
        offsets.append(struct.unpack_from(">q", result.buffer, position + mf.QUEUE_OFFSET_POS)[0])
        position += size
    return offsets


def five_to_ten(open_store, **overrides) -> MessageStore:
    """A queue with min offset 5 and max offset 10: the first CommitLog file (messages 0-4) is
    deleted by retention and with it the first ConsumeQueue file."""
    store = open_store(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=100, **overrides)
    store.put_messages([message(body=BODY_700) for _ in range(10)])
    wait_dispatched(store)
    assert store.clean_expired_files(force=True) == 1
    assert store.get_min_offset_in_queue("TopicTest", 0) == 5
    assert store.get_max_offset_in_queue("TopicTest", 0) == 10
    return store


@pytest.mark.parametrize(("requested", "status", "next_begin"), [
    (3, S.OFFSET_TOO_SMALL, 5),
    (10, S.OFFSET_OVERFLOW_ONE, 10),
    (12, S.OFFSET_OVERFLOW_BADLY, 10),
    (7, S.FOUND, 10),
])
def test_tv17_corrections_min_5_max_10(open_store, requested, status, next_begin) -> None:
    store = five_to_ten(open_store)
    result = store.get_message("g", "TopicTest", 0, requested, 32)
    assert (result.status, result.next_begin_offset) == (status, next_begin)
    assert (result.min_offset, result.max_offset) == (5, 10)
    if status is S.FOUND:
        assert queue_offsets(result) == [7, 8, 9]


def test_tv17_empty_queue(open_store) -> None:
    store = open_store()
    store.find_consume_queue("TopicTest", 0, create=True)
    result = store.get_message("g", "TopicTest", 0, 5, 32)
    assert (result.status, result.next_begin_offset, result.max_offset) == (S.NO_MESSAGE_IN_QUEUE, 0, 0)


def test_tv17_overflow_badly_with_min_zero(open_store) -> None:
    store = open_store()
    store.put_messages([message() for _ in range(10)])
    wait_dispatched(store)
    result = store.get_message("g", "TopicTest", 0, 12, 32)
    assert (result.status, result.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 0)


def test_unknown_queue_is_no_matched_logic_queue(open_store) -> None:
    store = open_store()
    result = store.get_message("g", "Nope", 3, 7, 32)
    assert (result.status, result.next_begin_offset, result.min_offset, result.max_offset) == (
        S.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)


@pytest.mark.parametrize("offset_check_in_slave", [False, True])
def test_tv4_slave_corrections(tmp_path, offset_check_in_slave) -> None:
    config = small_config(tmp_path / "store", mapped_file_size_commit_log=4096,
                          mapped_file_size_consume_queue=100)
    master = MessageStore(config)
    master.start()
    master.put_messages([message(body=BODY_700) for _ in range(10)])
    wait_dispatched(master)
    master.clean_expired_files(force=True)
    master.shutdown()
    config.broker_role = BrokerRole.SLAVE
    config.offset_check_in_slave = offset_check_in_slave
    slave = MessageStore(config)
    slave.start()
    try:
        expected = {3: 5, 10: 10, 12: 10} if offset_check_in_slave else {3: 3, 10: 10, 12: 12}
        for requested, next_begin in expected.items():
            assert slave.get_message("g", "TopicTest", 0, requested, 32).next_begin_offset == next_begin
        unknown = slave.get_message("g", "Nope", 0, 4, 32)
        assert unknown.next_begin_offset == (0 if offset_check_in_slave else 4)
    finally:
        slave.shutdown()


def test_max_msg_nums_and_next_begin_offset(open_store) -> None:
    store = open_store()
    store.put_messages([message(body=bytes([i])) for i in range(20)])
    wait_dispatched(store)
    result = store.get_message("g", "TopicTest", 0, 4, 3)
    assert result.status is S.FOUND and result.message_count == 3
    assert queue_offsets(result) == [4, 5, 6] and result.next_begin_offset == 7
    assert result.sizes.dtype == np.int32 and result.sizes.sum() == len(result.buffer)


def test_max_total_bytes_limits_but_first_message_always_fits(open_store) -> None:
    store = open_store()
    store.put_messages([message(body=b"x" * 100) for _ in range(10)])   # records of 200 bytes
    wait_dispatched(store)
    result = store.get_message("g", "TopicTest", 0, 0, 32, max_total_bytes=450)
    assert result.message_count == 2 and result.next_begin_offset == 2
    result = store.get_message("g", "TopicTest", 0, 0, 32, max_total_bytes=10)
    assert result.message_count == 1 and result.next_begin_offset == 1


def test_tag_filter_skips_but_advances(open_store) -> None:
    store = open_store()
    store.put_messages([message(body=bytes([i]), TAGS="TagA" if i % 3 == 0 else "TagB") for i in range(12)])
    wait_dispatched(store)
    tag_a = {mf.tags_hash_code("TagA")}
    result = store.get_message("g", "TopicTest", 0, 0, 32, tag_codes=tag_a)
    assert queue_offsets(result) == [0, 3, 6, 9] and result.next_begin_offset == 12
    # the batch is full at the 3rd entry after two matches: the break comes before filtering
    result = store.get_message("g", "TopicTest", 0, 0, 2, tag_codes=tag_a)
    assert queue_offsets(result) == [0, 3] and result.next_begin_offset == 4
    none = store.get_message("g", "TopicTest", 0, 1, 32, tag_codes={mf.tags_hash_code("TagC")})
    assert (none.status, none.next_begin_offset, none.message_count) == (S.NO_MATCHED_MESSAGE, 12, 0)


def test_interleaved_queues_gather_the_right_records(open_store) -> None:
    store = open_store(mapped_file_size_commit_log=4096)
    store.put_messages([message(queue_id=i % 3, body=f"m{i}".encode()) for i in range(90)])
    wait_dispatched(store)
    offset, seen = 0, []
    while offset < 30:
        result = store.get_message("g", "TopicTest", 1, offset, 1024)
        assert result.status is S.FOUND
        seen.extend(queue_offsets(result))
        offset = result.next_begin_offset
    assert seen == list(range(30))


@pytest.mark.parametrize("file_size", [1 << 20, 48 * 1024])   # one file; many file ends on the way
def test_many_interleaved_records_of_one_size_gather_byte_for_byte(open_store, file_size: int) -> None:
    """A queue's records of one size interleaved with two others' are each a run of their own: read
    by one vectorised gather per file (MappedFile.read_records, from MIN_VECTOR_RUNS runs on)."""
    store = open_store(mapped_file_size_commit_log=file_size, mapped_file_size_consume_queue=20 * 1024)
    store.put_messages([message(queue_id=i % 3, body=f"m{i:05d}".encode()) for i in range(3 * 600)])
    wait_dispatched(store)
    offset, bodies = 0, []
    while offset < 600:
        result = store.get_message("g", "TopicTest", 1, offset, 1024)
        assert result.status is S.FOUND
        starts = np.concatenate(([0], np.cumsum(result.sizes[:-1])))
        bodies += [result.buffer[start + mf.BODY_POS:start + mf.BODY_POS + 6] for start in starts.tolist()]
        assert queue_offsets(result) == list(range(offset, result.next_begin_offset))
        offset = result.next_begin_offset
    assert bodies == [f"m{3 * n + 1:05d}".encode() for n in range(600)]


def test_message_was_removing_before_consume_queue_cleanup(open_store) -> None:
    store = open_store(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=100)
    store.put_messages([message(body=BODY_700) for _ in range(10)])
    wait_dispatched(store)
    queue = store.commit_log.mapped_file_queue
    assert queue.delete_expired_file_by_time(0, 0, 0, clean_immediately=True) == 1   # CommitLog only
    result = store.get_message("g", "TopicTest", 0, 0, 32)
    assert (result.status, result.next_begin_offset, result.min_offset) == (S.MESSAGE_WAS_REMOVING, 5, 0)
    store.clean_expired_files()
    assert store.get_message("g", "TopicTest", 0, 0, 32).status is S.OFFSET_TOO_SMALL


def test_deleted_records_are_never_skipped_inside_a_found_answer(open_store) -> None:
    """Entries 0-4 lost their CommitLog file, 5-9 did not, all in one ConsumeQueue file: the pull
    at 0 answers MESSAGE_WAS_REMOVING up to 5 (RocketMQ would answer FOUND 5-9 and hide the loss),
    the pull at 5 finds 5-9."""
    store = open_store(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=20 * 64)
    store.put_messages([message(body=BODY_700) for _ in range(10)])
    wait_dispatched(store)
    queue = store.commit_log.mapped_file_queue
    assert queue.delete_expired_file_by_time(0, 0, 0, clean_immediately=True) == 1   # CommitLog only
    result = store.get_message("g", "TopicTest", 0, 0, 32)
    assert (result.status, result.next_begin_offset, result.message_count) == (S.MESSAGE_WAS_REMOVING, 5, 0)
    result = store.get_message("g", "TopicTest", 0, 5, 32)
    assert (result.status, result.next_begin_offset, result.message_count) == (S.FOUND, 10, 5)


def test_offset_found_null_when_consume_queue_file_is_missing(open_store) -> None:
    store = open_store(mapped_file_size_consume_queue=100)
    store.put_messages([message() for _ in range(12)])
    wait_dispatched(store)
    cq = store.find_consume_queue("TopicTest", 0)
    assert cq.mapped_file_queue.delete_files_below(lambda mapped: True, 0) == 2
    result = store.get_message("g", "TopicTest", 0, 1, 32)
    assert (result.status, result.next_begin_offset) == (S.OFFSET_FOUND_NULL, 5)


def test_offset_in_queue_by_time_and_last_store_timestamp(open_store) -> None:
    store = open_store()
    assert store.get_last_store_timestamp("TopicTest", 0) == 0
    stamps = []
    for _ in range(3):
        stamps.append(store.put_messages([message() for _ in range(4)])[0].store_timestamp)
        time.sleep(0.005)   # not an event: the store's clock moves on, so each batch has its own store time
    wait_dispatched(store)
    assert store.get_offset_in_queue_by_time("TopicTest", 0, stamps[1]) == 4
    assert store.get_offset_in_queue_by_time("TopicTest", 0, stamps[2]) == 8
    assert store.get_offset_in_queue_by_time("TopicTest", 0, 0) == 0
    assert store.get_offset_in_queue_by_time("TopicTest", 0, stamps[2] + 1) == 12
    assert store.get_last_store_timestamp("TopicTest", 0) == stamps[2]


def test_query_message_by_key_and_uniq_key(open_store) -> None:
    store = open_store()
    store.put_messages([message(body=f"b{i}".encode(), KEYS=f"order-{i % 4} common", UNIQ_KEY=f"U{i}")
                        for i in range(16)])
    store.put_message(message(topic="Other", KEYS="order-1"))
    wait_dispatched(store)
    result = store.query_message_by_key("TopicTest", "order-1", 32, 0, 2**62)
    assert result.status is S.FOUND and queue_offsets(result) == [1, 5, 9, 13]
    assert store.query_message_by_key("TopicTest", "common", 3, 0, 2**62).message_count == 3
    assert queue_offsets(store.query_message_by_key("TopicTest", "U7", 32, 0, 2**62)) == [7]
    missing = store.query_message_by_key("TopicTest", "nope", 32, 0, 2**62)
    assert (missing.status, missing.message_count) == (S.NO_MATCHED_MESSAGE, 0)
    assert store.query_message_by_key("TopicTest", "order-1", 32, 0, 1).message_count == 0


def test_index_rolls_to_a_new_file_when_full(open_store) -> None:
    store = open_store(max_index_num=8)
    store.put_messages([message(KEYS=f"k{i}") for i in range(20)])
    wait_dispatched(store)
    assert len(store.index_service.files) >= 3
    assert queue_offsets(store.query_message_by_key("TopicTest", "k17", 4, 0, 2**62)) == [17]
    assert queue_offsets(store.query_message_by_key("TopicTest", "k2", 4, 0, 2**62)) == [2]


def test_dispatch_listener_sees_visible_entries(open_store) -> None:
    store = open_store(flush_disk_type=FlushDiskType.ASYNC)
    seen: list[tuple[DispatchRequest, GetMessageStatus]] = []
    arrived = threading.Event()

    def listener(request: DispatchRequest) -> None:
        found = store.get_message("g", request.topic, request.queue_id, request.consume_queue_offset, 1)
        seen.append((request, found.status))
        arrived.set()

    store.add_dispatch_listener(listener)
    result = store.put_message(message(body=b"x", TAGS="TagA", KEYS="a b", UNIQ_KEY="U1"))
    assert arrived.wait(5)
    request, status = seen[0]
    assert status is S.FOUND
    assert (request.topic, request.queue_id, request.consume_queue_offset) == ("TopicTest", 0, 0)
    assert (request.commit_log_offset, request.msg_size) == (
        result.physical_offset, mf.calc_msg_length(1, 9, len(mf.encode_properties(
            {"TAGS": "TagA", "KEYS": "a b", "UNIQ_KEY": "U1"}))))
    assert (request.tags_code, request.keys, request.uniq_key) == (mf.tags_hash_code("TagA"), "a b", "U1")
    assert request.store_timestamp == result.store_timestamp


def test_delete_topic_removes_its_queues(open_store) -> None:
    store = open_store()
    store.put_messages([message(), message(topic="Keep")])
    wait_dispatched(store)
    store.delete_topic("TopicTest")
    assert store.get_message("g", "TopicTest", 0, 0, 32).status is S.NO_MATCHED_LOGIC_QUEUE
    assert store.get_max_offset_in_queue("TopicTest", 0) == 0
    assert store.get_message("g", "Keep", 0, 0, 32).status is S.FOUND
    assert store.put_message(message()).queue_offset == 0


@pytest.mark.parametrize("case", ["found", "tag missed", "record deleted", "far behind"])
def test_a_read_of_one_entry_answers_as_a_longer_scan_does(open_store, case) -> None:
    """A woken held pull reads one entry (the one-entry read, no arrays): the same statuses,
    next offsets, records and slave suggestion as when the entry is one of several."""
    store = open_store(mapped_file_size_commit_log=4096, mapped_file_size_consume_queue=100,
                       access_message_in_memory_max_ratio=0 if case == "far behind" else 40)
    store.put_messages([message(body=BODY_700, TAGS="a") for _ in range(10)])
    wait_dispatched(store)
    if case == "record deleted":   # the CommitLog file of entries 0-4, not their ConsumeQueue file
        queue = store.commit_log.mapped_file_queue
        assert queue.delete_expired_file_by_time(0, 0, 0, clean_immediately=True) == 1
    tag_codes = {mf.tags_hash_code("b")} if case == "tag missed" else None
    one, several = (store.get_message("g", "TopicTest", 0, offset, 32, tag_codes=tag_codes)
                    for offset in (4, 3))
    expected = {"found": (S.FOUND, 5, 1), "tag missed": (S.NO_MATCHED_MESSAGE, 5, 0),
                "record deleted": (S.MESSAGE_WAS_REMOVING, 5, 0), "far behind": (S.FOUND, 5, 1)}[case]
    assert (one.status, one.next_begin_offset, one.message_count) == expected
    assert (several.status, several.next_begin_offset) == expected[:2]
    assert one.suggest_pulling_from_slave is several.suggest_pulling_from_slave is (case == "far behind")
    if case in ("found", "far behind"):
        assert queue_offsets(one) == [4]
        assert one.buffer == several.buffer[-len(one.buffer):]
        assert one.sizes.tolist() == several.sizes.tolist()[-1:]


@pytest.mark.parametrize("tag", [None, "a"])
@pytest.mark.parametrize("memory_ratio", [40, 0])
def test_a_pull_of_one_message_answers_as_the_scan_of_several_does(open_store, tag, memory_ratio) -> None:
    """A pull of one message (maxMsgNums 1) reads its first entry without building columns: at
    every offset of a queue with tag misses and a pre-blank gap, the same status, next offset,
    record and slave suggestion as the vectorised scan (forced here by a filter taking all)."""
    store = open_store(access_message_in_memory_max_ratio=memory_ratio)
    store.put_messages([message(body=bytes([i]), TAGS="a" if i % 3 else "b") for i in range(6)])
    wait_dispatched(store)
    cq = store.find_consume_queue("TopicTest", 0)
    offset, size, code = cq.get_entries(0, 1)[0].tolist()
    cq.put_message_position_info(offset, size, code, 8)   # entries 6 and 7 are pre-blank
    tag_codes = None if tag is None else {mf.tags_hash_code(tag)}
    for queue_offset in range(9):
        one, scanned = (store.get_message("g", "TopicTest", 0, queue_offset, 1, tag_codes=tag_codes,
                                          record_filter=record_filter)
                        for record_filter in (None, lambda record: True))
        assert (one.status, one.next_begin_offset, one.message_count, one.suggest_pulling_from_slave) == (
            scanned.status, scanned.next_begin_offset, scanned.message_count,
            scanned.suggest_pulling_from_slave), queue_offset
        if one.status is S.FOUND:
            assert bytes(one.buffer) == bytes(scanned.buffer) and one.sizes.tolist() == scanned.sizes.tolist()


@pytest.mark.parametrize("max_msg_nums", [2, 3, 5, 16])
def test_an_unfiltered_read_answers_as_the_loop_does(open_store, max_msg_nums) -> None:
    """A read without filters takes a prefix of its entries, found by one cumulative sum (each
    batch of a Flight range read): at every offset of a queue with a pre-blank gap, and with byte
    limits at, below and above the records' sizes, the same status, next offset, records and
    slave suggestion as the read loop (forced here by a filter taking all)."""
    store = open_store()
    store.put_messages([message(body=b"x" * 100) for _ in range(6)])
    wait_dispatched(store)
    cq = store.find_consume_queue("TopicTest", 0)
    offset, size, code = cq.get_entries(0, 1)[0].tolist()
    cq.put_message_position_info(offset, size, code, 8)   # entries 6 and 7 are pre-blank
    for queue_offset in range(9):
        for max_bytes in (1, size - 1, size, size + 1, 2 * size - 1, 2 * size, 3 * size, 20 * size):
            prefix, looped = (store.get_message("g", "TopicTest", 0, queue_offset, max_msg_nums,
                                                max_total_bytes=max_bytes, record_filter=record_filter)
                              for record_filter in (None, lambda record: True))
            case = (queue_offset, max_bytes)
            assert (prefix.status, prefix.next_begin_offset, prefix.message_count,
                    prefix.suggest_pulling_from_slave) == (looped.status, looped.next_begin_offset,
                                                           looped.message_count,
                                                           looped.suggest_pulling_from_slave), case
            assert bytes(prefix.buffer) == bytes(looped.buffer), case
            assert prefix.sizes.tolist() == looped.sizes.tolist(), case


def test_a_read_through_the_file_answers_the_records_and_leaves_none_resident(open_store) -> None:
    """through_file (the timer enqueue task's read-back): the same records as a read through the
    map, across runs of other queues' records, and none of the CommitLog's pages enter this
    process's memory (1,000,000 parked timers read back through the map kept ~100 MiB resident)."""
    store = open_store(flush_disk_type=FlushDiskType.ASYNC, mapped_file_size_commit_log=1 << 20)
    store.put_messages([message(queue_id=index % 2, body=bytes([index]) * 300) for index in range(40)])
    wait_dispatched(store)
    by_file = store.get_message("g", "TopicTest", 0, 0, 32, through_file=True)
    one = store.get_message("g", "TopicTest", 1, 19, 32, through_file=True)
    resident = commit_log_resident_kib(store)
    by_map = store.get_message("g", "TopicTest", 0, 0, 32)
    assert by_file.message_count == 20 and bytes(by_file.buffer) == bytes(by_map.buffer)
    assert one.message_count == 1 and one.buffer == store.get_message("g", "TopicTest", 1, 19, 32).buffer
    assert resident == 0 < commit_log_resident_kib(store)


def commit_log_resident_kib(store: MessageStore) -> int:
    directory = str(store.config.store_dir / "commitlog")
    resident, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if "-" in fields[0] and len(fields) >= 5 and not fields[0].endswith(":"):
                inside = len(fields) >= 6 and fields[-1].startswith(directory)
            elif inside and fields[0] == "Rss:":
                resident += int(fields[1])
    return resident
