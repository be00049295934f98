"""A disk whose fsync takes longer than the broker's sync flush timeout (LazyFS with a fsync
delay): a sync-flush send gets FLUSH_DISK_TIMEOUT through the broker (spec store §10.1, TV13)
and the client raises it as an RmqError naming it, at the flush timeout (the broker does not
stand still while the disk syncs); the message was written, so it is readable once the flush
catches up. Skipped, with the reason, where FUSE cannot mount."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from integration_tests.reliability.brokers import configured_broker
from integration_tests.reliability.lazyfs import VolatileDisk, mounted_or_skip
from integration_tests.reliability.traffic import read_topic
from rmq.connector.client import OutgoingMessage, RmqClient, RmqError
from rmq.v1 import rmq_pb2

pytestmark = pytest.mark.integration

BROKER = "broker-a"
FSYNC_DELAY_S = 1.0
SYNC_FLUSH_TIMEOUT_MS = 100


@pytest.fixture
def slow_disk(tmp_path: Path) -> Iterator[VolatileDisk]:
    disk = mounted_or_skip(tmp_path, tmp_path / BROKER, fsync_delay_s=FSYNC_DELAY_S)
    yield disk
    disk.unmount()


def test_sync_send_on_a_disk_slower_than_the_flush_timeout_gets_flush_disk_timeout(
        tmp_path: Path, slow_disk: VolatileDisk) -> None:
    server = configured_broker(tmp_path, flush="sync", name=BROKER,
                               store={"sync_flush_timeout_ms": SYNC_FLUSH_TIMEOUT_MS,
                                      "mapped_file_size_commit_log": 1 << 20})
    server.start()
    try:
        with closing(RmqClient(server.address)) as client:
            client.create_topic("slow", queues=1)
            try:     # the first put maps the new ConsumeQueue and index pages through FUSE (slow)
                client.send("slow", [OutgoingMessage(b"warm-up")])
            except RmqError:
                pass
            started = time.monotonic()
            with pytest.raises(RmqError) as refused:
                client.send("slow", [OutgoingMessage(b"written-not-flushed")])
            answered_after = time.monotonic() - started
            assert refused.value.code == rmq_pb2.FLUSH_DISK_TIMEOUT
            # answered at the flush timeout, while the disk write goes on: the broker process
            # does not stand still during a sync (mmap.flush held the GIL through the msync)
            assert answered_after < FSYNC_DELAY_S / 2, f"answered after {answered_after:.2f} s"
            assert "not flushed to disk in time" in str(refused.value)
            read = read_topic(client, "slow")
    finally:
        server.stop()
    assert [m.body for m in read] == [b"warm-up", b"written-not-flushed"]   # written, the flush was late
