"""Where a pull's store read runs (issue 29 item 2): a read of at most 32 messages without a filter,
whose records are few bytes within the memory threshold, runs on the event loop itself (the
executor hop costs more CPU than such a read); a read that may copy more, or scan for a tag,
runs on the store executor so the loop keeps answering other calls meanwhile."""

from __future__ import annotations

import threading

import pytest

from rmq.broker_server.processors import pull_message_processor
from rmq.broker_server.processors.pull_message_processor import INLINE_MESSAGES
from rmq.v1 import rmq_pb2
from tests.broker_server import test_processors
from tests.broker_server.test_processors import Broker, pull, send

broker = test_processors.broker


def reading_threads(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that run the store reads of the pulls from now on."""
    threads: list[str] = []
    get_message = broker.store.get_message

    def watched(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return get_message(*args, **kwargs)

    monkeypatch.setattr(broker.store, "get_message", watched)
    return threads


def fill(broker: Broker, count: int, body: bytes, tags: str = "") -> None:
    send(broker, *[rmq_pb2.Message(body=body, tags=tags, queue_id=0) for _ in range(count)])


def test_a_small_unfiltered_read_in_memory_runs_on_the_event_loop(broker: Broker, monkeypatch) -> None:
    fill(broker, INLINE_MESSAGES + 8, b"x" * 100)
    threads = reading_threads(broker, monkeypatch)
    answer = pull(broker, 0, 0, max_messages=INLINE_MESSAGES)
    assert (answer.pull_status, answer.messages.count) == (rmq_pb2.FOUND, INLINE_MESSAGES)
    assert threads == [threading.current_thread().name]


def test_more_messages_more_bytes_or_a_tag_filter_read_on_the_store_executor(broker: Broker,
                                                                             monkeypatch) -> None:
    fill(broker, INLINE_MESSAGES + 8, b"x" * 100, tags="TagA")
    # 32 records of 100 B bodies (≈ 200 B each) are past it (the test store's messages are small)
    monkeypatch.setattr(pull_message_processor, "INLINE_BYTES", 4096)
    threads = reading_threads(broker, monkeypatch)
    answers = [pull(broker, 0, 0, max_messages=INLINE_MESSAGES + 1),
               pull(broker, 0, 0, max_messages=INLINE_MESSAGES),
               pull(broker, 0, 0, max_messages=8, sub_expression="TagA")]
    assert [(a.pull_status, a.messages.count) for a in answers] == [
        (rmq_pb2.FOUND, INLINE_MESSAGES + 1), (rmq_pb2.FOUND, INLINE_MESSAGES), (rmq_pb2.FOUND, 8)]
    assert len(threads) == 3 and all(name.startswith("store-call") for name in threads), threads


def test_records_past_the_memory_threshold_read_on_the_store_executor(broker: Broker, monkeypatch) -> None:
    """Records farther behind the CommitLog's end than the memory threshold (where getMessage
    suggests a slave, TV-6) may have left the page cache: a read of them must not stall the loop."""
    fill(broker, INLINE_MESSAGES + 8, b"x" * 100)
    # every record but the last is "on disk"
    monkeypatch.setattr(broker.store.reader, "_memory_threshold", 0)
    threads = reading_threads(broker, monkeypatch)
    answer = pull(broker, 0, 0, max_messages=INLINE_MESSAGES)
    assert (answer.pull_status, answer.messages.count) == (rmq_pb2.FOUND, INLINE_MESSAGES)
    assert len(threads) == 1 and threads[0].startswith("store-call"), threads
