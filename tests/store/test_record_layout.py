"""CommitLog record and ConsumeQueue entry bytes, put checks, end-of-file handling, offsets
(spec store §2, §3, §6; TV2, TV3, TV4, TV5, TV19)."""

from __future__ import annotations

import random
import struct
import zlib
from pathlib import Path

from rmq import message_format as mf
from rmq.store import FlushDiskType, MessageToStore, PutMessageStatus
from rmq.store.commit_log import (
    HEADER,
    TRANSACTION_PREPARED_TYPE,
    CommitLog,
    appended_dispatch,
    body_crc,
    parse_record,
)
from rmq.store.config import BrokerRole
from rmq.store.consume_queue import entry_bytes
from tests.spec_vectors import TV2_RECORD
from tests.store.conftest import encode, message, small_config, wait_dispatched


def test_tv1_record_lengths(tmp_path: Path) -> None:
    commit_log = CommitLog(small_config(tmp_path / "s"))
    assert encode(commit_log, MessageToStore("TopicTest", 0, b"hello", {}),
                  MessageToStore("TopicTest", 0, b"hello", {"KEYS": "k" * 14}),
                  MessageToStore("TopicTest", 0, b"", {})).lengths.tolist() == [105, 125, 100]
    commit_log.close()


def test_tv2_record_bytes_are_exact(tmp_path: Path) -> None:
    config = small_config(tmp_path / "s")
    commit_log = CommitLog(config)
    encoded = encode(commit_log, MessageToStore("T", 0, b"hi", {}, born_timestamp=1,
                                               born_host=bytes([127, 0, 0, 1]) + (1234).to_bytes(4, "big")))
    commit_log.append(encoded, store_timestamp=2)
    record = commit_log.get_message(0, int(encoded.lengths[0]))
    assert record.hex() == TV2_RECORD.hex()
    assert encoded.lengths[0] == 94 and body_crc(b"hi") == 1486039724
    assert mf.message_id(commit_log.store_host, 0) == "7F00000100002A9F0000000000000000"
    commit_log.close()


def test_body_crc_is_zlibs_crc32_at_every_length(tmp_path: Path) -> None:
    """BODYCRC is zlib's CRC-32 masked to 31 bits, as RocketMQ's UtilAll.crc32 computes it, for
    bodies short and long (the fast CRC folds 16-, 64- and 256-byte blocks; a mistake in a tail
    or a fold shows at some length), in the put path's column and in body_crc."""
    rng = random.Random(29)
    bodies = [rng.randbytes(length) for length in [*range(300), 1023, 1024, 1025, 4099, 65536 + 17]]
    assert [body_crc(body) for body in bodies] == [zlib.crc32(body) & 0x7FFFFFFF for body in bodies]
    config = small_config(tmp_path / "s", max_message_size=1 << 20, mapped_file_size_commit_log=1 << 20)
    commit_log = CommitLog(config)
    encoded = encode(commit_log, *(MessageToStore("T", 0, body, {}) for body in bodies))
    assert encoded.crcs.tolist() == [zlib.crc32(body) & 0x7FFFFFFF for body in bodies]
    commit_log.close()


def test_put_result_fields(open_store) -> None:
    store = open_store()
    result = store.put_message(message(body=b"hi"))
    assert result.status is PutMessageStatus.PUT_OK
    assert (result.queue_offset, result.physical_offset, result.queue_id) == (0, 0, 0)
    assert result.msg_id == "7F00000100002A9F0000000000000000"
    record = store.commit_log.get_message(0, 4 + 4)
    assert struct.unpack(">ii", record) == (mf.calc_msg_length(2, 9, 0), mf.MESSAGE_MAGIC_CODE)
    assert result.store_timestamp > 0


def test_tv3_topic_and_properties_limits(open_store) -> None:
    store = open_store(max_message_size=4 * 1024 * 1024, mapped_file_size_commit_log=1 << 20)
    assert store.put_message(message(topic="a" * 127)).ok
    assert store.put_message(message(topic="a" * 128)).status is PutMessageStatus.MESSAGE_ILLEGAL
    # properties string "k\x01" + value + "\x02": total length 32767 passes, 32768 fails
    assert store.put_message(message(k="v" * (32767 - 3))).ok
    too_long = store.put_message(message(k="v" * (32768 - 3)))
    assert too_long.status is PutMessageStatus.PROPERTIES_SIZE_EXCEEDED


def test_tv3_message_size_limit(open_store) -> None:
    store = open_store(max_message_size=4194304, mapped_file_size_commit_log=8 << 20)
    fits = 4194304 - mf.calc_msg_length(0, len("TopicTest"), 0)
    assert store.put_message(message(body=b"x" * fits)).ok
    result = store.put_message(message(body=b"x" * (fits + 1)))
    assert result.status is PutMessageStatus.MESSAGE_SIZE_EXCEEDED
    assert result.physical_offset == -1


def test_tv3_slave_refuses_puts(open_store) -> None:
    store = open_store(broker_role=BrokerRole.SLAVE)
    assert store.put_message(message()).status is PutMessageStatus.SERVICE_NOT_AVAILABLE


def test_invalid_message_rejects_whole_batch(open_store) -> None:
    store = open_store()
    results = store.put_messages([message(), message(topic="x" * 200), message()])
    assert [r.status for r in results] == [PutMessageStatus.MESSAGE_ILLEGAL] * 3
    assert store.get_commit_log_max_offset() == 0
    assert store.put_message(message()).queue_offset == 0


def _fill_to(store, position: int) -> None:
    """Append messages so the first CommitLog file's wrote position becomes exactly `position`."""
    overhead = mf.calc_msg_length(0, len("TopicTest"), 0)
    while store.get_commit_log_max_offset() < position:
        remaining = position - store.get_commit_log_max_offset()
        body = min(remaining - overhead, 2000)
        if remaining - overhead - body < 0 or 0 < remaining - overhead - body < overhead:
            body = remaining - 2 * overhead
        store.put_message(message(queue_id=1, body=b"f" * max(body, 0)))


def test_tv4_end_of_file_blank_record(open_store) -> None:
    store = open_store(mapped_file_size_commit_log=4096)
    _fill_to(store, 4096 - 24)
    assert store.get_commit_log_max_offset() == 4072
    result = store.put_message(message())   # msgLen 105: 105 + 8 > 24
    assert result.ok and result.physical_offset == 4096
    first = store.commit_log.mapped_file_queue.files[0]
    assert first.read(4072, 8) == bytes.fromhex("00000018cbd43194")
    assert first.wrote_position == 4096
    assert [f.path.name for f in store.commit_log.mapped_file_queue.files] == [
        "00000000000000000000", "00000000000000004096"]


def test_tv4_boundary_exact_fit(open_store) -> None:
    store = open_store(mapped_file_size_commit_log=4096)
    _fill_to(store, 4096 - 113)
    assert store.put_message(message()).physical_offset == 4096 - 113   # 113 > 113 is false: fits
    assert store.get_commit_log_max_offset() == 4096 - 8


def test_tv4_boundary_one_short(open_store) -> None:
    store = open_store(mapped_file_size_commit_log=4096)
    _fill_to(store, 4096 - 112)
    assert store.put_message(message()).physical_offset == 4096


def test_batch_spanning_files_is_readable(open_store) -> None:
    store = open_store(mapped_file_size_commit_log=4096)
    results = store.put_messages([message(body=bytes([i]) * 300) for i in range(40)])
    assert [r.queue_offset for r in results] == list(range(40))
    assert len(store.commit_log.mapped_file_queue.files) >= 3
    wait_dispatched(store)
    got, offset = [], 0
    while offset < 40:
        read = store.get_message("g", "TopicTest", 0, offset, 64)
        got.extend(_bodies(read))
        offset = read.next_begin_offset
    assert got == [bytes([i]) * 300 for i in range(40)]


def _bodies(result) -> list[bytes]:
    bodies, position = [], 0
    for size in result.sizes.tolist():
        body_length, = struct.unpack_from(">i", result.buffer, position + mf.BODY_LENGTH_POS)
        bodies.append(result.buffer[position + mf.BODY_POS:position + mf.BODY_POS + body_length])
        position += size
    return bodies


def test_tv5_queue_offsets_and_prepared_messages(open_store) -> None:
    store = open_store()
    assert store.put_message(message()).queue_offset == 0
    assert store.put_message(message()).queue_offset == 1
    prepared = MessageToStore("TopicTest", 0, b"p", {}, sys_flag=TRANSACTION_PREPARED_TYPE)
    assert store.put_message(prepared).queue_offset == 2
    assert store.commit_log.topic_queue_table["TopicTest-0"] == 2
    wait_dispatched(store)
    assert store.get_max_offset_in_queue("TopicTest", 0) == 2
    assert store.put_message(message()).queue_offset == 2


def test_tv5_physical_offset_in_a_later_file(tmp_path: Path) -> None:
    config = small_config(tmp_path / "s", mapped_file_size_commit_log=1073741824 // 1024)
    commit_log = CommitLog(config)
    size = config.mapped_file_size_commit_log
    commit_log.mapped_file_queue.create_file(size)
    commit_log.mapped_file_queue.files[0].wrote_position = 100
    appended = commit_log.append(encode(commit_log, message()), 5)
    assert appended.physical_offsets.tolist() == [size + 100]
    assert (appended.start_offset, appended.end_offset) == (size + 100, size + 100 + 105)
    header = HEADER.unpack(commit_log.get_message(size + 100, HEADER.size))
    assert header[6] == size + 100
    commit_log.close()


def test_tv5_wrote_offset_literal(tmp_path: Path) -> None:
    """TV5 literally: a write at position 100 of file "00000000001073741824" (1 GiB files) has
    wroteOffset 1073741924 (the file is sparse: only the touched pages exist)."""
    config = small_config(tmp_path / "s", mapped_file_size_commit_log=1073741824)
    commit_log = CommitLog(config)
    mapped = commit_log.mapped_file_queue.create_file(1073741824)
    assert mapped.path.name == "00000000001073741824"
    mapped.wrote_position = 100
    appended = commit_log.append(encode(commit_log, message()), 5)
    assert appended.physical_offsets.tolist() == [1073741924]
    assert HEADER.unpack(commit_log.get_message(1073741924, HEADER.size))[6] == 1073741924
    commit_log.close()


def test_dispatch_of_appended_records_equals_parsing_them(tmp_path: Path) -> None:
    commit_log = CommitLog(small_config(tmp_path / "s", mapped_file_size_commit_log=4096))
    encoded = encode(commit_log,
                     message(body=b"a" * 1500, TAGS="TagA", KEYS="k1 k2", UNIQ_KEY="U1"),
                     MessageToStore("Other", 3, b"b" * 1500, {"x": "y"}, sys_flag=TRANSACTION_PREPARED_TYPE),
                     message(body=b"c" * 1500, TAGS="TagB"))       # the third record starts the next file
    appended = commit_log.append(encoded, store_timestamp=9)
    parsed = []
    for offset, length in zip(appended.physical_offsets.tolist(), encoded.lengths.tolist(), strict=True):
        mapped = commit_log.mapped_file_queue.find_mapped_file_by_offset(offset)
        size, request = parse_record(mapped.mm, offset - mapped.file_from_offset,
                                     mapped.file_size, mapped.file_from_offset, True)
        assert size == length
        parsed.append(request)
    assert appended_dispatch(encoded, appended, 9).requests() == parsed
    assert (appended.start_offset, appended.end_offset) == (0, 4096 + int(encoded.lengths[2]))
    commit_log.close()


def test_property_separators_are_refused(open_store) -> None:
    store = open_store()
    assert store.put_message(message(k="a\x02KEYS\x01x")).status is PutMessageStatus.MESSAGE_ILLEGAL
    assert store.put_message(message(**{"a\x01b": "v"})).status is PutMessageStatus.MESSAGE_ILLEGAL


def test_tv19_consume_queue_entry_bytes(open_store) -> None:
    assert entry_bytes(1073741924, 105, 2598919).hex() == "0000000040000064" "00000069" "000000000027a807"
    store = open_store(flush_disk_type=FlushDiskType.ASYNC)
    for _ in range(8):
        store.put_message(message(TAGS="TagA"))
    wait_dispatched(store)
    cq = store.find_consume_queue("TopicTest", 0)
    first_file = cq.mapped_file_queue.files[0]
    assert first_file.path.parent == Path(store.config.store_dir) / "consumequeue" / "TopicTest" / "0"
    entry = first_file.read(7 * 20, 20)
    size = mf.calc_msg_length(5, 9, len("TAGS\x01TagA\x02"))
    assert struct.unpack(">qiq", entry) == (7 * size, size, 2598919)


def test_tv19_logical_offset_file_boundary(tmp_path: Path) -> None:
    from rmq.store.consume_queue import ConsumeQueue
    cq = ConsumeQueue("T", 0, tmp_path, 6_000_000)
    cq.put_message_position_info(1000, 100, 0, 300_000)
    names = [f.path.name for f in cq.mapped_file_queue.files]
    assert names == ["00000000000006000000"]
    assert cq.get_max_offset_in_queue() == 300_001 and cq.get_min_offset_in_queue() == 300_000
    assert cq.get_entry(300_000) == (1000, 100, 0)
    cq.close()
