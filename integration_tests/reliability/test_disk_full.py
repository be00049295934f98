"""Scenario 9: the disk holding the store fills up while the broker runs, or turns read-only.

The store lives on a small tmpfs mounted for the test (we run as root, so a read-only chmod
would not stop writes; a real full filesystem does). Two paths:
- the disk-usage thresholds (spec store §11, diskSpaceWarningLevelRatio) mark the store not
  writeable: sends are refused with SERVICE_NOT_AVAILABLE, pulls keep working, and writes
  resume once space is freed;
- the filesystem fills completely before the periodic check notices: the broker must refuse
  (not crash on a page fault in a sparse file) and keep serving what it stored.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from integration_tests.reliability.brokers import configured_broker
from integration_tests.reliability.report import ReliabilityReport, tally
from integration_tests.reliability.traffic import Producers, gaps_and_repeats, read_topic
from rmq import message_format as mf
from rmq.connector.client import OutgoingMessage, RmqClient, RmqError, RmqUnavailable
from rmq.v1 import rmq_pb2
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

TOPIC = "disk-full"
FILESYSTEM_MB = 24
SMALL_STORE = {
    "mapped_file_size_commit_log": 1024 * 1024,
    "mapped_file_size_consume_queue": 20 * 4096,
    "max_hash_slot_num": 1024,
    "max_index_num": 4096,
    "clean_resource_interval_ms": 200,
}


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Path]:
    mount_point = tmp_path / "fs"
    mount_point.mkdir()
    options = f"size={FILESYSTEM_MB}m"
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount_point)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _broker_on(filesystem: Path, logs: Path, **store: object):
    server = configured_broker(filesystem, flush="sync", store={**SMALL_STORE, **store})
    server.log_path = logs / "broker-a.log"     # the log must not need the full disk
    return server


def _fill(filesystem: Path, leave_bytes: int = 0) -> Path:
    """A filler file taking all free space but `leave_bytes`."""
    filler = filesystem / "filler"
    with open(filler, "wb") as file:
        chunk = bytes(256 * 1024)
        try:
            while True:
                free = subprocess.os.statvfs(filesystem)
                room = free.f_bavail * free.f_frsize - leave_bytes
                if room <= 0:
                    break
                file.write(chunk[:min(len(chunk), room)])
                file.flush()
        except OSError:
            pass
    return filler


def _send_one(client: RmqClient, body: bytes) -> RmqError | tuple[int, int]:
    try:
        result = client.send(TOPIC, [OutgoingMessage(body, queue_id=0)])
    except RmqUnavailable:
        raise
    except RmqError as error:
        return error
    return result.queue_ids[0], result.queue_offsets[0]


def test_disk_usage_threshold_refuses_writes_keeps_reads_and_recovers(
        small_filesystem: Path, tmp_path: Path, report: ReliabilityReport) -> None:
    server = _broker_on(small_filesystem, tmp_path, disk_space_warning_level_ratio=0.6,
                        disk_space_clean_forcibly_ratio=0.6)
    server.start()
    acknowledged: dict[bytes, tuple[int, int]] = {}
    refused: list[RmqError] = []
    sent = 0
    try:
        client = RmqClient(server.address)
        client.create_topic(TOPIC, queues=1)
        for n in range(500):
            body = f"before-{n}".encode()
            sent += 1
            placed = _send_one(client, body)
            assert not isinstance(placed, RmqError), placed
            acknowledged[body] = placed

        filler = _fill(small_filesystem, leave_bytes=FILESYSTEM_MB * 1024 * 1024 // 4)
        deadline = time.monotonic() + 15
        while not refused:
            assert time.monotonic() < deadline, "writes still accepted on a disk above the warning ratio"
            body = f"while-full-{sent}".encode()
            sent += 1
            placed = _send_one(client, body)
            if isinstance(placed, RmqError):
                refused.append(placed)
            else:
                acknowledged[body] = placed
            time.sleep(0.05)   # pacing the writes while the disk check catches up (polled, with a deadline)
        for n in range(20):                      # every further write is refused too
            sent += 1
            placed = _send_one(client, f"refused-{n}".encode())
            assert isinstance(placed, RmqError), "a write was accepted while the disk is marked full"
            refused.append(placed)
        while_full = read_topic(client, TOPIC)   # reads keep working

        filler.unlink()
        deadline = time.monotonic() + 15
        while True:
            body = f"after-{sent}".encode()
            sent += 1
            placed = _send_one(client, body)
            if not isinstance(placed, RmqError):
                acknowledged[body] = placed
                break
            assert time.monotonic() < deadline, f"writes still refused after space was freed: {placed}"
            time.sleep(0.1)
        read = read_topic(client, TOPIC)
        client.close()
    finally:
        server.stop()

    assert {e.code for e in refused} == {rmq_pb2.SERVICE_NOT_AVAILABLE}
    assert "disk" in refused[0].message.lower(), f"refusal does not say why: {refused[0]}"
    report.record_bad_input("send", "SendMessage while the disk is above the warning ratio", str(refused[0]))
    stored_before = {(q, o, b) for b, (q, o) in acknowledged.items() if not b.startswith(b"after-")}
    assert stored_before <= {(m.queue_id, m.queue_offset, m.body) for m in while_full}
    figures = report.record(tally(
        "9 disk above the warning ratio (tmpfs)", sent, acknowledged, (m.body for m in read),
        notes=f"{len(refused)} sends refused SERVICE_NOT_AVAILABLE, reads kept working, writes resumed"))
    assert figures.lost == 0 and figures.duplicated == 0
    placed = {(m.queue_id, m.queue_offset, m.body) for m in read}
    assert placed >= {(q, o, b) for b, (q, o) in acknowledged.items()}
    assert gaps_and_repeats(read) == ([], [])
    assert not any(m.body.startswith(b"refused-") for m in read)


def test_filesystem_full_before_the_check_refuses_writes_without_crashing(
        small_filesystem: Path, tmp_path: Path, report: ReliabilityReport) -> None:
    """Thresholds out of the way (ratios above 1): the store meets ENOSPC itself (new CommitLog
    file) and page faults on sparse ConsumeQueue / index pages of a full filesystem."""
    server = _broker_on(small_filesystem, tmp_path, disk_space_warning_level_ratio=1.01,
                        disk_space_clean_forcibly_ratio=1.01, disk_max_used_space_ratio=95)
    server.start()
    acknowledged: dict[bytes, tuple[int, int]] = {}
    refused: list[RmqError] = []
    sent = 0
    died: int | None = None
    try:
        client = RmqClient(server.address)
        client.create_topic(TOPIC, queues=1)
        for n in range(10):                      # the first CommitLog file exists before the disk fills
            sent += 1
            body = f"before-{n}".encode()
            acknowledged[body] = _send_one(client, body)
        filler = _fill(small_filesystem)
        for n in range(3000):                    # ~2 CommitLog files and several ConsumeQueue pages
            body = f"full-{n}:".encode().ljust(600, b".")
            sent += 1
            try:
                placed = _send_one(client, body)
            except RmqUnavailable:
                died = server.process.wait(10)
                break
            if isinstance(placed, RmqError):
                refused.append(placed)
                if len(refused) >= 20:
                    break
            else:
                acknowledged[body] = placed
        if died is not None:                     # what survived the crash, once there is space again
            filler.unlink()
            server.start()
        read = read_topic(client, TOPIC)
        client.close()
    finally:
        server.stop()

    figures = report.record(tally(
        "9 filesystem full (ENOSPC, tmpfs)", sent, acknowledged, (m.body for m in read),
        notes=(f"BUG: broker killed by signal {-died} after {sent} sends; " if died is not None else "")
              + f"{len(refused)} sends refused"
              + (f" ({refused[0].code_name}: {refused[0].message})" if refused else "")))
    assert figures.lost == 0 and figures.duplicated == 0
    assert gaps_and_repeats(read) == ([], [])
    assert died is None, (f"the broker died (exit {died}) on a full filesystem after {sent} sends "
                          f"instead of refusing the write")
    assert refused, "the broker accepted every write on a full filesystem"
    assert {e.code for e in refused} == {rmq_pb2.SERVICE_NOT_AVAILABLE}


def test_read_only_filesystem_is_refused_clearly_and_the_store_survives(
        small_filesystem: Path, tmp_path: Path, report: ReliabilityReport) -> None:
    """A store whose filesystem became read-only (remounted ro, as after I/O errors): the broker
    refuses to start with one clear line; once writable again it serves every message."""
    server = _broker_on(small_filesystem, tmp_path)
    server.start()
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=2)
        with Producers(server.address, TOPIC, threads=1, batch=50, max_batches=4) as producers:
            producers.wait()
    finally:
        assert server.stop() == 0
    subprocess.run(["mount", "-o", "remount,ro", str(small_filesystem)], check=True)
    try:
        with pytest.raises(RuntimeError, match="exited with code"):
            server.start()
    finally:
        server.stop()
        subprocess.run(["mount", "-o", "remount,rw", str(small_filesystem)], check=True)
    log = server.log()
    error = next((line for line in log.splitlines() if line.startswith("rmq: error:")), log[-500:])
    report.record_bad_input("broker start", "store on a read-only filesystem",
                            error.replace(str(small_filesystem), "$FS"))
    assert "read-only" in error.lower() and "Traceback" not in log

    server.start()
    try:
        with RmqClient(server.address) as client:
            read = read_topic(client, TOPIC)
    finally:
        server.stop()
    acknowledged = producers.ledger.acknowledged_messages()
    figures = report.record(tally(
        "9 store filesystem remounted read-only, then writable", producers.ledger.sent,
        (m.body for m in acknowledged), (m.body for m in read),
        notes="broker refused to start read-only with one clear line; data intact afterwards"))
    assert figures.lost == 0 and figures.duplicated == 0
    assert set(acknowledged) == set(read)


def _send_timer(client: RmqClient, body: bytes, delay_ms: int) -> RmqError | None:
    try:
        client.send(TOPIC, [OutgoingMessage(body, queue_id=0,
                                            properties={mf.PROPERTY_TIMER_DELAY_MS: str(delay_ms)})])
    except RmqUnavailable:
        raise
    except RmqError as error:
        return error
    return None


def test_timers_on_a_full_filesystem_are_refused_at_the_send_and_the_pending_ones_delivered(
        small_filesystem: Path, tmp_path: Path) -> None:
    """The timer wheel (16.6 MB) and the TimerLog segments are created with their blocks reserved
    (docs/internals/timer.md §Files): a first timer on a full filesystem is refused at the send
    with a reason; timers accepted while there was room are
    delivered (once there is room for their copies), and further ones are taken into the reserved
    TimerLog or refused — never a SIGBUS on a sparse page (the broker's death this test guards
    against)."""
    server = _broker_on(small_filesystem, tmp_path, disk_space_warning_level_ratio=1.01,
                        disk_space_clean_forcibly_ratio=1.01, disk_max_used_space_ratio=95)
    server.start()
    accepted: list[bytes] = []
    try:
        client = RmqClient(server.address)
        client.create_topic(TOPIC, queues=1)
        filler = _fill(small_filesystem)
        refused = _send_timer(client, b"first-timer", 1000)
        assert isinstance(refused, RmqError), "a first timer was accepted on a full filesystem"
        assert refused.code == rmq_pb2.SERVICE_NOT_AVAILABLE and "timer" in refused.message, refused
        filler.unlink()
        wait_until(lambda: _send_timer(client, b"early", 1500) is None,   # once the store takes writes
                   "a timer accepted once there is room again", timeout=15)
        accepted.append(b"early")                            # the wheel and a TimerLog segment exist
        filler = _fill(small_filesystem)
        for n in range(400):
            body = b"late-%d:" % n + b"." * 600
            if _send_timer(client, body, 1500) is None:
                accepted.append(body)
        assert server.process is not None and server.process.poll() is None, "the broker died"
        filler.unlink()   # the deliveries are stored once there is room
        wait_until(lambda: len(read_topic(client, TOPIC)) >= len(accepted),
                   f"the {len(accepted)} accepted timers delivered", timeout=30)
        delivered = [m.body for m in read_topic(client, TOPIC)]
        client.close()
        assert server.process is not None and server.process.poll() is None, "the broker died"
    finally:
        server.stop()
    assert len(accepted) > 1, "no timer was accepted into the reserved TimerLog"
    assert sorted(delivered) == sorted(accepted)   # each once
