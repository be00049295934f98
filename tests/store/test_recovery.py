"""Restart and recovery (spec store §9; TV11, TV12): normal restart, torn tails, abnormal exit,
kill -9 under SYNC flush, and refusal of directories that are not ours or corrupt."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from rmq import message_format as mf
from rmq.store import GetMessageStatus, MessageStore, MessageToStore, StoreError
from rmq.store.checkpoint import StoreCheckpoint
from rmq.store.commit_log import CommitLog, parse_record
from rmq.store.index_file import IndexFile, IndexService
from tests.store.conftest import encode, message, small_config, wait_dispatched
from tests.store.test_get_message import queue_offsets


def reopen(store: MessageStore) -> MessageStore:
    store.shutdown()
    again = MessageStore(store.config)
    again.start()
    return again


def all_records_valid(store: MessageStore) -> int:
    """Walk the CommitLog from its first to its last offset; every record must parse. Returns the count."""
    count = 0
    for mapped in store.commit_log.mapped_file_queue.files:
        position = 0
        while position < mapped.read_position():
            size, _ = parse_record(mapped.mm, position, mapped.file_size, mapped.file_from_offset, True)
            assert size >= 0, f"invalid record at {mapped.file_from_offset + position}"
            if size == 0:
                break
            position += size
            count += 1
        tail = mapped.read(mapped.read_position(), mapped.file_size - mapped.read_position())
        assert tail.strip(b"\0") == b"" or mapped.read_position() == mapped.file_size
    return count


def test_normal_restart_keeps_everything(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=4096))
    store.start()
    store.put_messages([message(queue_id=i % 2, body=f"m{i}".encode(), KEYS=f"k{i}") for i in range(60)])
    store = reopen(store)
    try:
        assert store.get_max_offset_in_queue("TopicTest", 0) == 30
        result = store.get_message("g", "TopicTest", 1, 0, 64)
        assert queue_offsets(result) == list(range(30))
        assert store.put_message(message(queue_id=1)).queue_offset == 30
        assert queue_offsets(store.query_message_by_key("TopicTest", "k7", 4, 0, 2**62)) == [3]
        checkpoint = StoreCheckpoint(tmp_path / "s" / "checkpoint")
        assert (tmp_path / "s" / "checkpoint").stat().st_size == 4096
        assert checkpoint.physic_msg_timestamp > 0 and checkpoint.logics_msg_timestamp > 0
    finally:
        store.shutdown()


def test_abort_file_exists_only_while_running(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s"))
    store.start()
    assert (tmp_path / "s" / "abort").exists()
    store.shutdown()
    assert not (tmp_path / "s" / "abort").exists()


def test_tv11_recover_normally_scan(tmp_path: Path) -> None:
    config = small_config(tmp_path / "s", mapped_file_size_commit_log=1024)
    commit_log = CommitLog(config)
    big = MessageToStore("T", 0, b"x" * (930 - 92))
    commit_log.append(encode(commit_log, big, big), 1)                     # A and B: one record + blank
    commit_log.append(encode(commit_log, MessageToStore("T", 0, b"y" * 8),       # 100 bytes
                             MessageToStore("T", 0, b"z" * 108)), 1)               # 200 bytes
    assert [f.file_from_offset for f in commit_log.mapped_file_queue.files] == [0, 1024, 2048]
    commit_log.close()
    reloaded = CommitLog(config)
    reloaded.load()
    assert reloaded.recover(True, StoreCheckpoint(tmp_path / "cp")) == (2348, 0)
    assert reloaded.get_max_offset() == 2348
    reloaded.close()


def test_tv11_normal_scan_starts_at_third_last_file(tmp_path: Path) -> None:
    config = small_config(tmp_path / "s", mapped_file_size_commit_log=1024)
    commit_log = CommitLog(config)
    commit_log.append(encode(commit_log, *[MessageToStore("T", 0, b"x" * 808)] * 5), 1)
    commit_log.close()
    reloaded = CommitLog(config)
    reloaded.load()
    assert reloaded.recover(True, StoreCheckpoint(tmp_path / "cp")) == (4 * 1024 + 900, 2 * 1024)
    reloaded.close()


def test_empty_commit_log_destroys_consume_queues(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s"))
    store.start()
    store.put_message(message())
    store.shutdown()
    for path in (tmp_path / "s" / "commitlog").iterdir():
        path.unlink()
    store = MessageStore(store.config)
    store.start()
    try:
        assert store.get_message("g", "TopicTest", 0, 0, 1).status is GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
        assert store.put_message(message()).queue_offset == 0
    finally:
        store.shutdown()


@pytest.mark.parametrize(("crashed", "damage"), [(False, "garbage"), (True, "garbage"), (True, "truncate")])
def test_torn_tail_is_truncated_and_consume_queue_follows(tmp_path: Path, crashed: bool, damage: str) -> None:
    store = MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=4096))
    store.start()
    results = store.put_messages([message(body=f"body-{i}".encode()) for i in range(20)])
    store.shutdown()
    last = results[-1]
    path = tmp_path / "s" / "commitlog" / str(last.physical_offset // 4096 * 4096).zfill(20)
    position = last.physical_offset % 4096
    if damage == "garbage":                   # half-written last record + garbage after it
        with open(path, "r+b") as file:
            file.seek(position + 60)
            file.write(os.urandom(200))
    else:                                     # the file itself ends inside the last record
        os.truncate(path, position + 60)
    if crashed:
        (tmp_path / "s" / "abort").touch()
    store = MessageStore(store.config)
    store.start()
    try:
        assert store.get_commit_log_max_offset() == last.physical_offset
        assert store.get_max_offset_in_queue("TopicTest", 0) == 19
        assert store.get_message("g", "TopicTest", 0, 19, 1).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        assert queue_offsets(store.get_message("g", "TopicTest", 0, 0, 64)) == list(range(19))
        assert all_records_valid(store) == 19
        again = store.put_message(message(body=b"after"))
        assert (again.queue_offset, again.physical_offset) == (19, last.physical_offset)
    finally:
        store.shutdown()


def test_abnormal_exit_rebuilds_lost_consume_queues(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=4096))
    store.start()
    store.put_messages([message(queue_id=i % 3, body=b"x" * 50) for i in range(150)])
    store.shutdown()
    for queue_dir in (tmp_path / "s" / "consumequeue" / "TopicTest").iterdir():
        for path in queue_dir.iterdir():
            path.unlink()
    (tmp_path / "s" / "abort").touch()
    store = MessageStore(store.config)
    store.start()
    try:
        for queue_id in range(3):
            assert queue_offsets(store.get_message("g", "TopicTest", queue_id, 0, 64)) == list(range(50))
        assert store.put_message(message(queue_id=2)).queue_offset == 50
    finally:
        store.shutdown()


def test_tv12_index_files_newer_than_checkpoint_dropped_after_crash(tmp_path: Path) -> None:
    for name, end in (("20260101000000000", 1000), ("20260101000000001", 1001)):
        index_file = IndexFile(tmp_path / name, 16, 16)
        index_file.put_key("T#a", 0, end)
        index_file.close()
    service = IndexService(tmp_path, 16, 16)
    service.load(last_exit_ok=True, index_msg_timestamp=1000)
    assert len(service.files) == 2
    service.close()
    service = IndexService(tmp_path, 16, 16)
    service.load(last_exit_ok=False, index_msg_timestamp=1000)
    assert [f.path.name for f in service.files] == ["20260101000000000"]
    assert not (tmp_path / "20260101000000001").exists()
    service.close()


# -- directories that are not ours ---------------------------------------------------------


def test_refuses_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "cat.jpg").write_bytes(b"meow")
    with pytest.raises(StoreError, match=r"photos: not an rmq store directory .*cat.jpg"):
        MessageStore(small_config(tmp_path / "photos"))
    assert (tmp_path / "photos" / "cat.jpg").read_bytes() == b"meow"
    assert sorted(p.name for p in (tmp_path / "photos").iterdir()) == ["cat.jpg"]


def test_refuses_a_foreign_marker_and_a_file_path(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "store.json").write_text('{"format": "something-else"}')
    with pytest.raises(StoreError, match="not an rmq store marker"):
        MessageStore(small_config(tmp_path / "d"))
    (tmp_path / "f").write_text("x")
    with pytest.raises(StoreError, match="not a directory"):
        MessageStore(small_config(tmp_path / "f"))


def test_unusable_path_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "plain-file").write_text("x")
    with pytest.raises(StoreError, match="plain-file/store: cannot use the store directory: Not a directory"):
        MessageStore(small_config(tmp_path / "plain-file" / "store"))


def test_refuses_different_file_size_configuration(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=8192))
    store.start()
    store.put_message(message())
    store.shutdown()
    problem = "created with mapped_file_size_commit_log=8192, the configuration says 4096"
    with pytest.raises(StoreError, match=problem):
        MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=4096))


def test_refuses_a_second_process_on_the_same_directory(open_store) -> None:
    store = open_store()
    with pytest.raises(StoreError, match="in use by another process"):
        MessageStore(store.config)


@pytest.mark.parametrize(("name", "size", "problem"), [
    ("readme.txt", 10, "not a store file"),
    ("00000000000000008192", 100, "size 100 differs"),
])
def test_refuses_bad_commit_log_files(tmp_path: Path, name: str, size: int, problem: str) -> None:
    store = MessageStore(small_config(tmp_path / "s"))
    store.start()
    store.put_messages([message(body=b"x" * 3000) for _ in range(6)])
    store.shutdown()
    (tmp_path / "s" / "commitlog" / name).write_bytes(bytes(size))
    if name.isdigit():   # not the last file any more: a wrong size is not a torn creation
        (tmp_path / "s" / "commitlog" / "00000000000000016384").write_bytes(bytes(8192))
    store = MessageStore(store.config)
    with pytest.raises(StoreError, match=problem):
        store.start()
    store = MessageStore(store.config)   # the failed start released the directory lock
    with pytest.raises(StoreError):
        store.start()


def test_refuses_corruption_before_the_tail(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=4096))
    store.start()
    store.put_messages([message(body=b"x" * 1000) for _ in range(10)])
    store.shutdown()
    first = tmp_path / "s" / "commitlog" / "00000000000000004096"   # normal recovery scans the last 3 files
    data = bytearray(first.read_bytes())
    data[1200] ^= 0xFF                      # inside the second record's body: CRC mismatch
    first.write_bytes(bytes(data))
    before = {p.name: p.read_bytes() for p in (tmp_path / "s" / "commitlog").iterdir()}
    store = MessageStore(store.config)
    problem = r"00000000000000004096: invalid record .* corrupt beyond a torn tail"
    with pytest.raises(StoreError, match=problem):
        store.start()
    assert {p.name: p.read_bytes() for p in (tmp_path / "s" / "commitlog").iterdir()} == before


def test_refuses_corruption_inside_the_last_file(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=65536))
    store.start()
    results = store.put_messages([message(body=b"x" * 300) for _ in range(20)])
    store.shutdown()
    (tmp_path / "s" / "abort").touch()
    last = tmp_path / "s" / "commitlog" / "00000000000000000000"
    data = bytearray(last.read_bytes())
    data[results[10].physical_offset + 100] ^= 0xFF         # record 10's body: records 11-19 follow
    last.write_bytes(bytes(data))
    store = MessageStore(store.config)
    with pytest.raises(StoreError, match=f"invalid record at position {results[10].physical_offset} .* "
                                         f"complete record follows at offset {results[11].physical_offset}"):
        store.start()
    assert last.read_bytes() == bytes(data)


def test_garbage_shaped_like_a_record_after_the_tail_is_torn(tmp_path: Path) -> None:
    store = MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=65536))
    store.start()
    results = store.put_messages([message(body=b"x" * 300) for _ in range(5)])
    store.shutdown()
    end = results[-1].physical_offset + 300 + 91 + 9
    last = tmp_path / "s" / "commitlog" / "00000000000000000000"
    with open(last, "r+b") as file:
        file.seek(end)
        file.write(struct.pack(">ii", 400, mf.MESSAGE_MAGIC_CODE) + os.urandom(392))
    (tmp_path / "s" / "abort").touch()
    store = MessageStore(store.config)
    store.start()
    try:
        assert store.get_commit_log_max_offset() == end
        assert store.put_message(message()).physical_offset == end
    finally:
        store.shutdown()


# -- kill -9 under SYNC flush ---------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
WRITER = textwrap.dedent("""
    import sys
    from pathlib import Path

    sys.path.insert(0, sys.argv[2])
    from rmq.store import MessageStore, MessageToStore
    from tests.store.conftest import small_config

    store = MessageStore(small_config(Path(sys.argv[1]), mapped_file_size_commit_log=16384))
    store.start()
    print("started", flush=True)
    sequence = 0
    while True:
        batch = [MessageToStore("KillTest", (sequence + i) % 2, f"message-{sequence + i}".encode() * 3,
                                {"KEYS": f"k{sequence + i}"}) for i in range(7)]
        sequence += len(batch)
        for sent, result in zip(batch, store.put_messages(batch)):
            if result.status.name == "PUT_OK":
                print(result.queue_id, result.queue_offset, sent.body.decode(), flush=True)
""")


@pytest.mark.integration
def test_kill_9_loses_nothing_acknowledged(tmp_path: Path) -> None:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    child = subprocess.Popen([sys.executable, str(script), str(tmp_path / "s"), str(ROOT)],
                             stdout=subprocess.PIPE, text=True)
    acknowledged: list[tuple[int, int, str]] = []
    try:
        assert child.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 60
        while len(acknowledged) < 400 and time.monotonic() < deadline:
            queue_id, queue_offset, body = child.stdout.readline().split()
            acknowledged.append((int(queue_id), int(queue_offset), body))
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        for line in child.stdout.read().splitlines():   # acknowledged before it died
            parts = line.split()
            if len(parts) == 3:
                acknowledged.append((int(parts[0]), int(parts[1]), parts[2]))
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL and len(acknowledged) >= 400
    assert (tmp_path / "s" / "abort").exists()
    store = MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=16384))
    store.start()
    try:
        wait_dispatched(store)
        for queue_id in (0, 1):
            expected = {offset: body for q, offset, body in acknowledged if q == queue_id}
            got, offset = {}, 0
            while offset < store.get_max_offset_in_queue("KillTest", queue_id):
                result = store.get_message("g", "KillTest", queue_id, offset, 256)
                position = 0
                for size in result.sizes.tolist():
                    body_length = int.from_bytes(result.buffer[position + 84:position + 88], "big")
                    queue_offset = int.from_bytes(result.buffer[position + 20:position + 28], "big")
                    got[queue_offset] = result.buffer[position + 88:position + 88 + body_length].decode()
                    position += size
                offset = result.next_begin_offset
            assert sorted(got) == list(range(len(got)))           # no holes in the queue
            assert {k: got.get(k) for k in expected} == expected   # every acknowledged message intact
        assert all_records_valid(store) >= len(acknowledged)
        assert store.put_message(MessageToStore("KillTest", 0, b"after")).ok
    finally:
        store.shutdown()
    assert mf.MESSAGE_MAGIC_CODE  # the layout module is the one the records were checked against


def test_a_start_with_truncate_to_drops_the_records_from_that_offset_and_their_queue_entries(
        tmp_path: Path) -> None:
    """Controller mode: a member rejoining a group whose new master never held its last records
    drops them (CommitLog, ConsumeQueue, index); the next put takes their queue offsets."""
    store = MessageStore(small_config(tmp_path / "s", mapped_file_size_commit_log=4096))
    store.start()
    store.put_messages([message(body=f"m{i}".encode(), KEYS=f"k{i}") for i in range(40)])
    cut = store.get_commit_log_max_offset()
    store.put_messages([message(body=f"x{i}".encode(), KEYS=f"x{i}") for i in range(30)])
    store.shutdown()
    store = MessageStore(store.config)
    store.start(truncate_to=cut)
    try:
        assert store.get_commit_log_max_offset() == cut
        assert store.get_max_offset_in_queue("TopicTest", 0) == 40
        assert queue_offsets(store.get_message("g", "TopicTest", 0, 0, 100)) == list(range(40))
        assert queue_offsets(store.query_message_by_key("TopicTest", "x3", 4, 0, 2**62)) == []
        assert store.put_message(message(body=b"next")).queue_offset == 40
        assert all_records_valid(store) == 41
    finally:
        store.shutdown()
