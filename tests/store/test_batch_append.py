"""Column-wise batch append: the records are byte for byte what a per-record encoder writes
(spec store §3, TV2/TV4), queue offsets per queue, validation of the whole batch, and the
dispatch of a batch (ConsumeQueue entries, listeners)."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmq import message_format as mf
from rmq.store import DispatchRequest, FlushDiskType, MessageToStore, PutMessageStatus
from rmq.store.commit_log import BLANK, HEADER, TRANSACTION_PREPARED_TYPE, CommitLog
from rmq.store.message_batch import MessageBatch
from tests.store.conftest import encode, small_config, wait_dispatched

FILE_SIZE = 2048
HOST = bytes([10, 0, 0, 7]) + (9876).to_bytes(4, "big")


def reference_record(message: MessageToStore, queue_offset: int, physical_offset: int, store_timestamp: int,
                     store_host: bytes) -> bytes:
    """One record packed field by field with struct, straight from spec store §3."""
    properties = mf.encode_properties(message.properties).encode()
    topic = message.topic.encode()
    body = message.body
    length = mf.calc_msg_length(len(body), len(topic), len(properties))
    header = HEADER.pack(
        length, mf.MESSAGE_MAGIC_CODE, zlib.crc32(body) & 0x7FFFFFFF, message.queue_id, message.flag,
        queue_offset, physical_offset, message.sys_flag, message.born_timestamp, message.born_host,
        store_timestamp, store_host, message.reconsume_times, 0, len(body))
    return header + body + bytes([len(topic)]) + topic + len(properties).to_bytes(2, "big") + properties


class ReferenceLog:
    """The CommitLog bytes a per-record append loop produces, END_OF_FILE blanks included."""

    def __init__(self, file_size: int, store_host: bytes) -> None:
        self.file_size, self.store_host = file_size, store_host
        self.data = bytearray()
        self.queue_table: dict[str, int] = {}

    def append(self, messages: list[MessageToStore], store_timestamp: int) -> list[tuple[int, int]]:
        placed = []
        for message in messages:
            key = f"{message.topic}-{message.queue_id}"
            queue_offset = self.queue_table.get(key, 0)
            record = reference_record(message, queue_offset, 0, store_timestamp, self.store_host)
            position = len(self.data) % self.file_size
            if position + len(record) + mf.END_FILE_MIN_BLANK_LENGTH > self.file_size:
                blank = BLANK.pack(self.file_size - position, mf.BLANK_MAGIC_CODE)
                self.data += blank + bytes(self.file_size - position - len(blank))
            physical_offset = len(self.data)
            self.data += reference_record(message, queue_offset, physical_offset, store_timestamp,
                                          self.store_host)
            if not message.sys_flag & TRANSACTION_PREPARED_TYPE:
                self.queue_table[key] = queue_offset + 1
            placed.append((physical_offset, queue_offset))
        return placed


def written_bytes(commit_log: CommitLog) -> bytes:
    files = commit_log.mapped_file_queue.files
    last = files[-1]
    return b"".join([bytes(f.mm[:f.file_size]) for f in files[:-1]] + [bytes(last.mm[:last.wrote_position])])


messages_strategy = st.builds(
    MessageToStore,
    topic=st.sampled_from(["T", "Topic-ü", "x" * 127]),
    queue_id=st.integers(0, 3),
    body=st.binary(min_size=0, max_size=700),
    properties=st.dictionaries(st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "ключ", "a"]),
                               st.text(st.characters(blacklist_characters="\x01\x02",
                                                     blacklist_categories=["Cs"]), max_size=12), max_size=4),
    flag=st.integers(-2**31, 2**31 - 1),
    born_timestamp=st.integers(0, 2**62),
    born_host=st.just(HOST),
    sys_flag=st.sampled_from([0, TRANSACTION_PREPARED_TYPE, 0x8, 0xC]),
    reconsume_times=st.integers(0, 16),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.lists(messages_strategy, min_size=1, max_size=12), min_size=1, max_size=4))
def test_batch_records_equal_the_per_record_encoding(tmp_path_factory, batches) -> None:
    config = small_config(tmp_path_factory.mktemp("s"), mapped_file_size_commit_log=FILE_SIZE)
    commit_log = CommitLog(config)
    reference = ReferenceLog(FILE_SIZE, commit_log.store_host)
    try:
        for store_timestamp, messages in enumerate(batches, 1):
            appended = commit_log.append(encode(commit_log, *messages), store_timestamp)
            placed = reference.append(messages, store_timestamp)
            assert list(zip(appended.physical_offsets.tolist(), appended.queue_offsets.tolist(),
                            strict=True)) == placed
            assert appended.end_offset == len(reference.data)
        assert written_bytes(commit_log) == bytes(reference.data)
        assert commit_log.topic_queue_table == reference.queue_table
    finally:
        commit_log.close()


def test_a_batch_spanning_three_files(tmp_path: Path) -> None:
    commit_log = CommitLog(small_config(tmp_path / "s", mapped_file_size_commit_log=FILE_SIZE))
    messages = [MessageToStore("T", n % 2, bytes([n]) * 900, {"TAGS": "ü"}) for n in range(5)]
    appended = commit_log.append(encode(commit_log, *messages), 3)
    reference = ReferenceLog(FILE_SIZE, commit_log.store_host)
    reference.append(messages, 3)
    assert [f.file_from_offset for f in commit_log.mapped_file_queue.files] == [0, FILE_SIZE, 2 * FILE_SIZE]
    assert written_bytes(commit_log) == bytes(reference.data)
    assert appended.queue_offsets.tolist() == [0, 0, 1, 1, 2]
    assert appended.start_offset == 0 and appended.end_offset == len(reference.data)
    commit_log.close()


@pytest.mark.parametrize(("bad", "status"), [
    (MessageToStore("", 0, b"x"), PutMessageStatus.MESSAGE_ILLEGAL),
    (MessageToStore("T" * 128, 0, b"x"), PutMessageStatus.MESSAGE_ILLEGAL),
    (MessageToStore("T", -1, b"x"), PutMessageStatus.MESSAGE_ILLEGAL),
    (MessageToStore("T", 2**31, b"x"), PutMessageStatus.MESSAGE_ILLEGAL),
    (MessageToStore("T", 0, b"x", flag=-2**31 - 1), PutMessageStatus.MESSAGE_ILLEGAL),
    (MessageToStore("T", 0, b"x", sys_flag=2**31), PutMessageStatus.MESSAGE_ILLEGAL),
    (MessageToStore("T", 0, b"x", reconsume_times=-2**31 - 1), PutMessageStatus.MESSAGE_ILLEGAL),
    (MessageToStore("T", 0, b"x", born_host=b"short"), PutMessageStatus.MESSAGE_ILLEGAL),
    (MessageToStore("T", 0, b"x", {"a": "b\x02c"}), PutMessageStatus.MESSAGE_ILLEGAL),
    (MessageToStore("T", 0, b"x", {"a": "v" * 40000}), PutMessageStatus.PROPERTIES_SIZE_EXCEEDED),
    (MessageToStore("T", 0, b"x" * 5000), PutMessageStatus.MESSAGE_SIZE_EXCEEDED),
])
@pytest.mark.parametrize("alone", [False, True], ids=["in a batch", "alone"])  # one message: scalar checks
def test_one_bad_message_refuses_the_whole_batch(open_store, bad: MessageToStore,
                                                 status: PutMessageStatus, alone: bool) -> None:
    store = open_store(max_message_size=4096)
    batch = [bad] if alone else [MessageToStore("T", 0, b"fine"), bad, MessageToStore("T", 1, b"fine")]
    results = store.put_messages(batch)
    assert [r.status for r in results] == [status] * len(batch)
    assert store.get_commit_log_max_offset() == 0


def test_the_first_failing_message_names_the_status(open_store) -> None:
    store = open_store(max_message_size=4096)
    too_big, illegal = MessageToStore("T", 0, b"x" * 5000), MessageToStore("", 0, b"x")
    assert store.put_messages([too_big, illegal])[0].status is PutMessageStatus.MESSAGE_SIZE_EXCEEDED
    assert store.put_messages([illegal, too_big])[0].status is PutMessageStatus.MESSAGE_ILLEGAL


def test_malformed_properties_bytes_are_illegal(open_store) -> None:
    store = open_store()
    for properties in (b"TAGS\x01a", b"TAGS\x02", b"a\x01b\x01c\x02", b"\xff\x01x\x02"):
        result = store.put_batch(MessageBatch.of("T", 0, [b"x"], properties))
        assert result.status is PutMessageStatus.MESSAGE_ILLEGAL, properties
    assert store.get_commit_log_max_offset() == 0


def test_columns_must_have_one_entry_per_body() -> None:
    with pytest.raises(ValueError, match="every column must hold 2 entries"):
        MessageBatch.of("T", [0, 1, 2], [b"a", b"b"])


def test_put_batch_over_several_queues(open_store) -> None:
    store = open_store(flush_disk_type=FlushDiskType.ASYNC)
    topics = ["A", "B", "A", "A", "B"]
    result = store.put_batch(MessageBatch.of(topics, [0, 0, 1, 0, 0], [b"m%d" % n for n in range(5)],
                                             b"TAGS\x01t\x02", born_hosts=HOST))
    assert result.ok
    assert result.queue_offsets.tolist() == [0, 0, 0, 1, 1]
    assert result.msg_ids() == [mf.message_id(store.commit_log.store_host, offset)
                                for offset in result.physical_offsets.tolist()]
    wait_dispatched(store)
    found = store.get_message("g", "A", 0, 0, 32)
    assert found.message_count == 2
    assert [store.get_max_offset_in_queue(t, q) for t, q in (("A", 0), ("A", 1), ("B", 0))] == [2, 1, 2]


def test_listeners_see_the_newest_entry_per_queue_and_tags_code(open_store) -> None:
    store = open_store(flush_disk_type=FlushDiskType.ASYNC)
    seen: list[DispatchRequest] = []
    store.add_dispatch_listener(seen.append)
    properties = [b"TAGS\x01a\x02", b"TAGS\x01b\x02", b"TAGS\x01a\x02", b"TAGS\x01a\x02", b""]
    store.put_batch(MessageBatch.of("T", [0, 0, 0, 1, 0], [b"x"] * 5, properties,
                                    sys_flags=[0, 0, 0, 0, TRANSACTION_PREPARED_TYPE]))
    wait_dispatched(store)
    assert [(r.queue_id, r.consume_queue_offset, r.tags_code) for r in seen] == [
        (0, 1, mf.tags_hash_code("b")), (0, 2, mf.tags_hash_code("a")), (1, 0, mf.tags_hash_code("a"))]


def test_a_one_message_put_announces_its_entry_unless_prepared(open_store) -> None:
    """The one-message dispatch (the latency path) queues and announces a NOT message, and
    neither queues nor announces a PREPARED one."""
    store = open_store(flush_disk_type=FlushDiskType.ASYNC)
    seen: list[DispatchRequest] = []
    store.add_dispatch_listener(seen.append)
    store.put_batch(MessageBatch.of("T", 0, [b"p"], b"TAGS\x01a\x02", sys_flags=TRANSACTION_PREPARED_TYPE))
    store.put_batch(MessageBatch.of("T", 0, [b"x"], b"TAGS\x01a\x02"))
    wait_dispatched(store)
    assert [(r.queue_id, r.consume_queue_offset, r.tags_code) for r in seen] == [
        (0, 0, mf.tags_hash_code("a"))]
    assert store.get_max_offset_in_queue("T", 0) == 1


def test_reput_dispatch_equals_the_putters(tmp_path: Path, open_store) -> None:
    """Entries dispatched from parsed records (recovery) equal those of the putting thread."""
    store = open_store(flush_disk_type=FlushDiskType.ASYNC)
    store.put_batch(MessageBatch.of(["A", "B"] * 20, np.arange(40) % 3, [b"%d" % n for n in range(40)],
                                    b"TAGS\x01t\x02KEYS\x01k\x02"))
    wait_dispatched(store)
    queues = {(t, q): store.find_consume_queue(t, q).get_entries(0, 64).tobytes()
              for t in ("A", "B") for q in range(3)}
    store.shutdown()
    for path in (tmp_path / "store" / "consumequeue").rglob("*"):
        if path.is_file():
            path.unlink()
    reopened = open_store()
    wait_dispatched(reopened)
    assert {key: reopened.find_consume_queue(*key).get_entries(0, 64).tobytes() for key in queues} == queues


def test_try_put_batch_stores_like_put_batch_or_writes_nothing_when_it_would_wait(open_store) -> None:
    """The broker's event loop stores small batches with try_put_batch: it answers what put_batch
    would, or None with nothing written when the put would wait (lock held, new file, SYNC flush)."""
    store = open_store(flush_disk_type=FlushDiskType.ASYNC)
    assert store.try_put_batch(MessageBatch.of("T", 0, [b"a"])) is None   # no CommitLog file yet
    assert store.put_batch(MessageBatch.of("T", 0, [b"a"])).ok
    second = store.try_put_batch(MessageBatch.of("T", 0, [b"b"]))
    assert second is not None and second.ok and second.queue_offsets.tolist() == [1]
    assert store.get_message("g", "T", 0, 0, 32).message_count == 2
    end = store.get_commit_log_max_offset()
    with store.commit_log._put_lock:     # another putter is appending
        assert store.try_put_batch(MessageBatch.of("T", 0, [b"c"])) is None
    too_big = bytes(store.config.mapped_file_size_commit_log - end)
    assert store.try_put_batch(MessageBatch.of("T", 0, [too_big])) is None   # needs the next file
    assert store.get_commit_log_max_offset() == end and store.get_max_offset_in_queue("T", 0) == 2
    assert store.put_batch(MessageBatch.of("T", 0, [b"c"])).queue_offsets.tolist() == [2]


def test_try_put_batch_leaves_waiting_puts_to_put_batch(open_store) -> None:
    store = open_store()     # SYNC flush: an OK answer waits for the disk
    assert store.try_put_batch(MessageBatch.of("T", 0, [b"a"])) is None
    assert store.get_commit_log_max_offset() == 0
