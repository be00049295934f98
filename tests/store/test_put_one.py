"""The single-message put path (MessageStore.put_one / try_put_one, issue 41): one record
written byte for byte as the batch path writes it, its queue offset, its ConsumeQueue entry and
dispatch, the batch path's refusals, the file roll handed to the batch path, and SYNC flush
answering PUT_OK only for what is on disk."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest

from rmq import message_format as mf
from rmq.store import DispatchRequest, FlushDiskType, MessageStore, OneRecord, PutMessageStatus
from rmq.store.commit_log import TRANSACTION_PREPARED_TYPE
from rmq.store.message_batch import MessageBatch
from tests.store.test_batch_append import reference_record

HOST = bytes([10, 0, 0, 7]) + (9876).to_bytes(4, "big")


def record(queue_id: int = 0, body: bytes = b"hello", **properties: str) -> OneRecord:
    field = mf.encode_properties(properties).encode() if properties else b""
    return OneRecord("TopicTest", queue_id, body, field, flag=3, born_timestamp=1, born_host=HOST)


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC, FlushDiskType.SYNC])
def test_one_record_is_the_batch_paths_record(open_store: Callable[..., MessageStore],
                                               flush: FlushDiskType) -> None:
    store = open_store(flush_disk_type=flush)
    seen: list[DispatchRequest] = []
    store.add_dispatch_listener(seen.append)
    sent = [record(0, b"a" * 600, TAGS="t", KEYS="k1 k2") for _ in range(20)]   # past a file end (8 KiB)
    results = [store.put_one(one) for one in sent]
    assert [r.status for r in results] == [PutMessageStatus.PUT_OK] * 20
    assert [r.queue_offset for r in results] == list(range(20))
    for one, result in zip(sent, results, strict=True):
        expected = reference_record(one.to_store(), result.queue_offset, result.physical_offset,
                                    result.store_timestamp, store.commit_log.store_host)
        assert store.look_message_by_offset(result.physical_offset) == expected
        assert result.msg_id == mf.message_id(store.commit_log.store_host, result.physical_offset)
    read = store.get_message("g", "TopicTest", 0, 0, 32)
    assert read.message_count == 20
    assert [r.consume_queue_offset for r in seen] == list(range(20))
    assert seen[0].tags_code == mf.tags_hash_code("t") and seen[0].keys == "k1 k2"
    if flush is FlushDiskType.SYNC:   # acknowledged: on disk
        assert store.commit_log.mapped_file_queue.flushed_where >= results[-1].physical_offset + 600


def test_try_put_one_stores_without_waiting_under_async_flush(
        open_store: Callable[..., MessageStore]) -> None:
    store = open_store(flush_disk_type=FlushDiskType.ASYNC)
    assert store.try_put_one(record(1)) is None   # the first CommitLog file is still to be created
    store.put_one(record(1))
    first, second = store.try_put_one(record(1)), store.try_put_one(record(1))
    assert first is not None and second is not None
    assert (first.queue_offset, second.queue_offset) == (1, 2)
    assert store.get_message("g", "TopicTest", 1, 0, 8).message_count == 3


def test_try_put_one_declines_what_would_wait(open_store: Callable[..., MessageStore]) -> None:
    """SYNC flush waits for the disk: the event loop must not; nothing is written."""
    store = open_store(flush_disk_type=FlushDiskType.SYNC)
    assert store.try_put_one(record()) is None
    assert store.get_max_offset_in_queue("TopicTest", 0) == 0


def test_a_prepared_record_takes_no_queue_offset_and_stays_invisible(
        open_store: Callable[..., MessageStore]) -> None:
    store = open_store()
    store.put_one(record())   # creates the first CommitLog file: what follows takes the single path
    half = store.put_one(replace(record(), sys_flag=TRANSACTION_PREPARED_TYPE))
    plain = store.put_one(record())
    assert half.ok and (half.queue_offset, plain.queue_offset) == (1, 1)
    assert store.get_max_offset_in_queue("TopicTest", 0) == 2


@pytest.mark.parametrize(("bad", "status"), [
    (OneRecord("", 0, b"x"), PutMessageStatus.MESSAGE_ILLEGAL),
    (OneRecord("t" * 128, 0, b"x"), PutMessageStatus.MESSAGE_ILLEGAL),
    (OneRecord("t", 0, b"x", b"a\x01b"), PutMessageStatus.MESSAGE_ILLEGAL),
    (OneRecord("t", 0, b"x", b"a\x01" + b"b" * 40000 + b"\x02"), PutMessageStatus.PROPERTIES_SIZE_EXCEEDED),
    (OneRecord("t", 0, b"x", born_host=b"short"), PutMessageStatus.MESSAGE_ILLEGAL),
    (OneRecord("t", -1, b"x"), PutMessageStatus.MESSAGE_ILLEGAL),
    (OneRecord("t", 0, b"x", flag=2**31), PutMessageStatus.MESSAGE_ILLEGAL),
    (OneRecord("t", 0, b"x" * 5000), PutMessageStatus.MESSAGE_SIZE_EXCEEDED),
])
def test_refusals_match_the_batch_path(open_store: Callable[..., MessageStore], bad: OneRecord,
                                       status: PutMessageStatus) -> None:
    store = open_store(max_message_size=4096)
    assert store.put_one(bad).status is status
    batch = MessageBatch.of(bad.topic, [bad.queue_id], [bad.body], [bad.properties], flags=[bad.flag],
                            born_hosts=[bad.born_host])
    assert store.put_batch(batch).status is status
    assert store.get_commit_log_max_offset() == 0
