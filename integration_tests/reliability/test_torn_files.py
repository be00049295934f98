"""Scenario 4: torn and corrupt store files, at store level and through a broker restart.

Recovery (spec store §9) must repair what a crash can leave behind — a torn or truncated
CommitLog tail, garbage after the last record, ConsumeQueue entries pointing past the CommitLog,
a missing checkpoint, an abort file — without losing or duplicating any complete message, and
must refuse, with an error naming the file, what it cannot repair without silently dropping
data: a corrupt record followed by valid ones, a directory that is not an rmq store.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from integration_tests.reliability.brokers import configured_broker
from integration_tests.reliability.report import ReliabilityReport, tally
from integration_tests.reliability.traffic import (
    Producers,
    StoredMessage,
    gaps_and_repeats,
    read_topic,
)
from rmq import message_format as mf
from rmq.connector.client import RmqClient
from rmq.connector.spark.message_decoder import decode
from rmq.store import BrokerRole, FlushDiskType, MessageStore, MessageStoreConfig, MessageToStore, StoreError
from rmq.v1 import rmq_pb2
from testing import processes

pytestmark = pytest.mark.integration

TOPIC = "torn"
QUEUES = 2
COUNT = 600                      # ~3 CommitLog files of 64 KiB with 200-byte bodies
CQ_ENTRIES_PER_FILE = 128


def _config(root: Path) -> MessageStoreConfig:
    return MessageStoreConfig(
        store_dir=root, flush_disk_type=FlushDiskType.SYNC, mapped_file_size_commit_log=64 * 1024,
        mapped_file_size_consume_queue=20 * CQ_ENTRIES_PER_FILE, max_hash_slot_num=1024, max_index_num=4096)


def _body(n: int) -> bytes:
    return f"message-{n}:".encode().ljust(200, b"#")


def _fill(root: Path, count: int = COUNT) -> list[StoredMessage]:
    """A cleanly shut down store holding `count` messages over QUEUES queues."""
    store = MessageStore(_config(root))
    store.start()
    try:
        results = store.put_messages([MessageToStore(TOPIC, n % QUEUES, _body(n)) for n in range(count)])
    finally:
        store.shutdown()
    assert all(result.ok for result in results)
    return [StoredMessage(r.queue_id, r.queue_offset, _body(n)) for n, r in enumerate(results)]


def _read_store(store: MessageStore) -> list[StoredMessage]:
    """Every message of every queue of TOPIC, from min to max offset, decoded by the client's decoder."""
    messages: list[StoredMessage] = []
    for queue_id in range(QUEUES):
        offset = store.get_min_offset_in_queue(TOPIC, queue_id)
        end = store.get_max_offset_in_queue(TOPIC, queue_id)
        while offset < end:
            result = store.get_message("reader", TOPIC, queue_id, offset, 64)
            assert result.message_count, f"queue {queue_id} offset {offset}: {result.status}"
            packed = rmq_pb2.PackedMessages(count=result.message_count, records=result.buffer,
                                            sizes=result.sizes.astype("<i4").tobytes())
            columns = decode(packed, "store").to_pydict()
            messages += [StoredMessage(q, o, b) for q, o, b in
                         zip(columns["queue_id"], columns["queue_offset"], columns["body"], strict=True)]
            offset = result.next_begin_offset
    return messages


def _reopen_and_read(root: Path) -> tuple[list[StoredMessage], StoredMessage]:
    """Recover the store, read everything, then check it still takes writes: the new message
    lands right after the recovered tail of its queue."""
    store = MessageStore(_config(root))
    store.start()
    try:
        read = _read_store(store)
        expected_offset = store.get_max_offset_in_queue(TOPIC, 0)
        result = store.put_message(MessageToStore(TOPIC, 0, b"after-recovery"))
        assert result.ok and result.queue_offset == expected_offset
        after = StoredMessage(0, result.queue_offset, b"after-recovery")
        assert after in _read_store(store)
    finally:
        store.shutdown()
    return read, after


# -- file surgery --------------------------------------------------------------------------------

def _commit_log_files(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def _records(path: Path) -> list[tuple[int, int]]:
    """(position, size) of the records at the start of a CommitLog file."""
    data = path.read_bytes()
    found, position = [], 0
    while position + 8 <= len(data):
        size, magic = struct.unpack_from(">ii", data, position)
        if magic != mf.MESSAGE_MAGIC_CODE:
            break
        found.append((position, size))
        position += size
    return found


def _overwrite(path: Path, position: int, data: bytes) -> None:
    with open(path, "r+b") as file:
        file.seek(position)
        file.write(data)


def _crash_marks(root: Path) -> None:
    """What kill -9 leaves: the abort file of a store that did not shut down."""
    (root / "abort").touch()


def _torn_last_record(root: Path) -> int:
    last = _commit_log_files(root)[-1]
    position, size = _records(last)[-1]
    _overwrite(last, position + size // 2, bytes(size - size // 2))
    _crash_marks(root)
    return 1


def _truncated_last_file(root: Path) -> int:
    last = _commit_log_files(root)[-1]
    position, size = _records(last)[-1]
    os.truncate(last, position + size // 2)
    _crash_marks(root)
    return 1


def _garbage_after_last_record(root: Path) -> int:
    last = _commit_log_files(root)[-1]
    position, size = _records(last)[-1]
    _overwrite(last, position + size, os.urandom(1000))
    _crash_marks(root)
    return 0


def _garbage_that_looks_like_a_record(root: Path) -> int:
    """A record header (right magic, plausible size) whose content is garbage: a torn write."""
    last = _commit_log_files(root)[-1]
    position, size = _records(last)[-1]
    _overwrite(last, position + size, struct.pack(">ii", 300, mf.MESSAGE_MAGIC_CODE) + os.urandom(292))
    _crash_marks(root)
    return 0


def _consume_queue_entries_past_commit_log_end(root: Path) -> int:
    """Three entries after the real ones in queue 0, pointing far past the CommitLog's end."""
    last = sorted((root / "consumequeue" / TOPIC / "0").iterdir())[-1]
    data = last.read_bytes()
    entries = 0
    while entries * 20 + 20 <= len(data) and struct.unpack_from(">qi", data, entries * 20)[1] > 0:
        entries += 1
    _overwrite(last, entries * 20, struct.pack(">qiq", 1 << 40, 291, 0) * 3)
    return 0


def _missing_checkpoint_after_crash(root: Path) -> int:
    (root / "checkpoint").unlink()
    _crash_marks(root)
    return 0


def _abort_file_left(root: Path) -> int:
    _crash_marks(root)
    return 0


def _consume_queues_lost(root: Path) -> int:
    for path in sorted((root / "consumequeue").rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    return 0


REPAIRABLE: dict[str, Callable[[Path], int]] = {
    "torn last CommitLog record (abort file)": _torn_last_record,
    "CommitLog file truncated mid-record (abort file)": _truncated_last_file,
    "garbage after the last CommitLog record (abort file)": _garbage_after_last_record,
    "garbage with a record header after the last record (abort file)": _garbage_that_looks_like_a_record,
    "ConsumeQueue entries pointing past the CommitLog end": _consume_queue_entries_past_commit_log_end,
    "checkpoint file missing (abort file)": _missing_checkpoint_after_crash,
    "abort file present (abnormal recovery)": _abort_file_left,
    "ConsumeQueue directory deleted": _consume_queues_lost,
}


@pytest.mark.parametrize("fault", list(REPAIRABLE))
def test_recovery_repairs_crash_damage_without_losing_complete_messages(
        fault: str, tmp_path: Path, report: ReliabilityReport) -> None:
    root = tmp_path / "store"
    stored = _fill(root)
    torn = REPAIRABLE[fault](root)          # messages the fault destroys (a torn tail), at the end
    intact = stored[:len(stored) - torn]

    read, after = _reopen_and_read(root)

    figures = report.record(tally(   # acknowledged = what the store acknowledged, torn ones included
        f"4 store: {fault}", len(stored), (m.body for m in stored), (m.body for m in read),
        notes=f"lost = the {torn} record(s) the fault tore, dropped by design" if torn else "repaired"))
    assert figures.lost == torn and figures.duplicated == 0
    assert {m.body for m in stored} - {m.body for m in read} == {m.body for m in stored[len(intact):]}
    assert set(intact) <= set(read), "a complete message moved to another offset"
    assert len(read) == len(intact), "recovery resurrected a torn or fake message"
    assert gaps_and_repeats(read) == ([], [])


def _corrupt_body_in(path: Path, record_index: int) -> bytes:
    """Flip one body byte of a complete record (its CRC no longer matches); returns the body."""
    position, _ = _records(path)[record_index]
    data = path.read_bytes()
    body_length, = struct.unpack_from(">i", data, position + mf.BODY_LENGTH_POS)
    body = data[position + mf.BODY_POS:position + mf.BODY_POS + body_length]
    _overwrite(path, position + mf.BODY_POS, bytes([body[0] ^ 0xFF]))
    return body


def test_corrupt_record_followed_by_later_files_is_refused(tmp_path: Path, report: ReliabilityReport) -> None:
    root = tmp_path / "store"
    _fill(root)
    middle_file = _commit_log_files(root)[-2]
    _corrupt_body_in(middle_file, len(_records(middle_file)) // 2)

    with pytest.raises(StoreError, match=middle_file.name) as refused:
        MessageStore(_config(root)).start()
    report.record_bad_input("store directory", "bad CRC mid CommitLog, later files hold records",
                            _relative(refused.value, tmp_path))


def test_corrupt_record_followed_by_valid_records_in_the_same_file_is_refused(
        tmp_path: Path, report: ReliabilityReport) -> None:
    """A bad CRC in the middle of the last file with complete records after it is not a torn
    tail: truncating there would silently drop every later acknowledged message."""
    root = tmp_path / "store"
    stored = _fill(root)
    last = _commit_log_files(root)[-1]
    victim = _corrupt_body_in(last, len(_records(last)) // 2)
    _crash_marks(root)

    store = MessageStore(_config(root))
    try:
        store.start()
    except StoreError as error:
        assert last.name in str(error)
        report.record_bad_input("store directory", "bad CRC mid the last CommitLog file",
                                _relative(error, tmp_path))
        return
    try:
        read = _read_store(store)
    finally:
        store.shutdown()
    figures = report.record(tally(
        "4 store: corrupt record mid last CommitLog file (abort file)", len(stored),
        (m.body for m in stored if m.body != victim), (m.body for m in read),
        notes="BUG: recovery truncated at the bad record instead of refusing"))
    pytest.fail(f"recovery accepted a corrupt CommitLog middle and silently dropped "
                f"{figures.lost} complete messages after it")


def test_a_slave_truncates_at_an_invalid_record_whatever_follows(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """A slave's CommitLog is a copy of its master's, and a kill -9 while a replicated chunk is
    being copied can leave complete records after an unwritten one (memcpy need not write in
    order; seen in the slave kill -9 scenario): the slave truncates there, with a warning, and
    replication fetches the rest again. A master refuses the same files (test above)."""
    root = tmp_path / "store"
    stored = _fill(root)
    last = _commit_log_files(root)[-1]
    index = len(_records(last)) // 2
    position = _records(last)[index][0]
    _corrupt_body_in(last, index)
    _crash_marks(root)
    store = MessageStore(dataclasses.replace(_config(root), broker_role=BrokerRole.SLAVE))
    store.start()
    try:
        kept = store.get_commit_log_max_offset()
        read = _read_store(store)
    finally:
        store.shutdown()
    assert kept == int(last.name) + position
    assert "truncated there on this slave" in caplog.text
    assert {m.body for m in read} < {m.body for m in stored}


def test_foreign_directory_is_refused(tmp_path: Path, report: ReliabilityReport) -> None:
    root = tmp_path / "not-a-store"
    root.mkdir()
    (root / "photos.txt").write_text("holiday")
    with pytest.raises(StoreError, match="not an rmq store directory") as refused:
        MessageStore(_config(root))
    assert (root / "photos.txt").read_text() == "holiday" and len(list(root.iterdir())) == 1
    report.record_bad_input("store directory", "a directory holding other files",
                            _relative(refused.value, tmp_path))


def test_store_created_with_other_file_sizes_is_refused(tmp_path: Path, report: ReliabilityReport) -> None:
    root = tmp_path / "store"
    _fill(root, count=10)
    other = _config(root)
    other.mapped_file_size_commit_log = 128 * 1024
    with pytest.raises(StoreError, match="mapped_file_size_commit_log") as refused:
        MessageStore(other)
    report.record_bad_input("store directory", "reopened with another CommitLog file size",
                            _relative(refused.value, tmp_path))


def _relative(error: Exception | str, tmp_path: Path) -> str:
    """The error text with the test's temporary directory shown as `$TMP`."""
    return str(error).replace(str(tmp_path), "$TMP")


# -- through a broker restart --------------------------------------------------------------------

def test_broker_recovers_torn_files_after_kill9(tmp_path: Path, report: ReliabilityReport) -> None:
    """kill -9 (abnormal exit), then garbage after the CommitLog tail and ConsumeQueue entries
    past it: the restarted broker serves every acknowledged message exactly once."""
    server = processes.broker(tmp_path, flush="sync")
    server.start()
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=QUEUES)
        with Producers(server.address, TOPIC, threads=2, batch=16, max_batches=20) as producers:
            producers.wait()
        server.kill()
        root = tmp_path / "broker-a"
        _garbage_after_last_record(root)
        _consume_queue_entries_past_commit_log_end(root)
        server.start()
        with RmqClient(server.address) as client:
            read = read_topic(client, TOPIC)
    finally:
        server.stop()
    acknowledged = producers.ledger.acknowledged_messages()
    figures = report.record(tally(
        "4 broker: kill -9, garbage tail, ConsumeQueue past end", producers.ledger.sent,
        (m.body for m in acknowledged), (m.body for m in read), notes="repaired on restart"))
    assert figures.lost == 0 and figures.duplicated == 0
    assert set(acknowledged) <= set(read)
    assert gaps_and_repeats(read) == ([], [])


def test_broker_refuses_a_corrupt_commit_log_with_one_clear_line(
        tmp_path: Path, report: ReliabilityReport) -> None:
    server = configured_broker(tmp_path, store={"mapped_file_size_commit_log": 64 * 1024})
    server.start()
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=QUEUES)
        with Producers(server.address, TOPIC, threads=1, batch=100, max_batches=12) as producers:
            producers.wait()
    finally:
        server.stop()
    middle = _commit_log_files(tmp_path / "broker-a")[-2]
    _corrupt_body_in(middle, 10)

    try:
        with pytest.raises(RuntimeError, match="exited with code"):
            server.start()
    finally:
        server.stop()
    log = server.log()
    assert middle.name in log and "Traceback" not in log
    error_line = next(line for line in log.splitlines() if middle.name in line)
    report.record_bad_input("broker start", "bad CRC mid CommitLog (rmq broker)",
                            _relative(error_line, tmp_path))
