"""ConsumeMessageConcurrentlyService: status classification (spec consumer-pull-rebalance
TV-13), batching (consumption-longpolling-offsets TV-9), result handling (TV-10: send-back,
local re-consume after 5 s, broadcasting drop, dropped queues) and the offset rule (TV-12)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from rmq.connector.consume_message_concurrently_service import (
    ConsumeMessageConcurrentlyService,
    ConsumeRequest,
    ConsumeReturnType,
    classify,
    split_batches,
)
from rmq.connector.consumer_config import ConsumerConfig, MessageModel
from rmq.connector.message import MessageExt
from rmq.connector.message_listener import ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus
from rmq.connector.offset_store import LocalFileOffsetStore, ReadOffsetType
from rmq.connector.process_queue import ProcessQueue
from tests.connector.sdk_support import MQ, RecordingScheduler, message
from tests.waiting import wait_until

TINY_TIMEOUT_MINUTES = 1e-9   # 60 ns: every listener call lasts longer (a consume timeout must be positive)

OK = ConsumeConcurrentlyStatus.CONSUME_SUCCESS
LATER = ConsumeConcurrentlyStatus.RECONSUME_LATER


@pytest.mark.parametrize(
    ("status", "has_exception", "rt_ms", "expected"),
    [
        (OK, False, 10, ConsumeReturnType.SUCCESS),
        (LATER, False, 10, ConsumeReturnType.FAILED),
        (None, False, 10, ConsumeReturnType.RETURNNULL),
        (None, True, 10, ConsumeReturnType.EXCEPTION),
        (OK, False, 15 * 60 * 1000, ConsumeReturnType.TIME_OUT),
        (LATER, False, 15 * 60 * 1000, ConsumeReturnType.TIME_OUT),
        (OK, False, 15 * 60 * 1000 - 1, ConsumeReturnType.SUCCESS),
    ],
)
def test_tv13_classification(
    status: ConsumeConcurrentlyStatus | None, has_exception: bool, rt_ms: int, expected: ConsumeReturnType
) -> None:
    assert classify(status, has_exception, rt_ms, consume_timeout_minutes=15) is expected


@pytest.mark.parametrize(
    ("count", "batch", "sizes"), [(32, 1, [1] * 32), (32, 10, [10, 10, 10, 2]), (5, 10, [5])]
)
def test_longpolling_tv9_batching(count: int, batch: int, sizes: list[int]) -> None:
    assert [len(b) for b in split_batches([message(i) for i in range(count)], batch)] == sizes


class Harness:
    def __init__(
        self, tmp_path: Path, listener, broadcasting: bool = False, failing_back: Sequence[int] = (),
        **settings: float,
    ):
        self.sent_back: list[tuple[int, int]] = []
        self.failing_back = set(failing_back)
        self.store = LocalFileOffsetStore(tmp_path, "G")
        self.scheduler = RecordingScheduler()
        model = MessageModel.BROADCASTING if broadcasting else MessageModel.CLUSTERING
        self.service = ConsumeMessageConcurrentlyService(
            listener,
            ConsumerConfig("G", message_model=model, **{"consume_thread_max": 2,
                                                        "consume_message_batch_max_size": 4, **settings}),
            offset_store=self.store,
            send_message_back=self.send_back,
            scheduler=self.scheduler,
        )
        self.service.start(lambda: [self.pq])
        self.scheduler.scheduled.clear()   # the periodic consume-timeout clean-up
        self.pq = ProcessQueue()

    def send_back(self, msg: MessageExt, level: int) -> bool:
        if msg.queue_offset in self.failing_back:
            return False
        self.sent_back.append((msg.queue_offset, level))
        return True

    def run(self, *offsets: int) -> ConsumeRequest:
        messages = [message(o) for o in offsets]
        self.pq.put_message(messages)
        request = ConsumeRequest(messages, self.pq, MQ)
        self.service.run(request)
        return request

    def offset(self) -> int:
        return self.store.read_offset(MQ, ReadOffsetType.READ_FROM_MEMORY)


def test_tv10_success_acks_the_batch_and_commits(tmp_path: Path) -> None:
    h = Harness(tmp_path, lambda msgs, ctx: OK)
    h.run(10)
    assert h.sent_back == [] and h.offset() == 11 and h.pq.msg_count == 0


def test_tv10_reconsume_later_sends_back_all_and_a_failed_send_back_is_consumed_again_in_5_s(
    tmp_path: Path,
) -> None:
    calls: list[list[int]] = []

    def listener(msgs, ctx: ConsumeConcurrentlyContext):
        calls.append([m.queue_offset for m in msgs])
        return LATER if len(calls) == 1 else OK

    h = Harness(tmp_path, listener, failing_back=[12])
    h.run(10, 11, 12, 13)
    assert h.sent_back == [(10, 0), (11, 0), (13, 0)]
    assert h.pq.held_offsets() == [12]
    assert h.offset() == 12  # the minimum still held
    assert [delay for delay, _ in h.scheduler.scheduled] == [5.0]
    h.scheduler.run_all()
    wait_until(lambda: h.pq.msg_count == 0, "the retried message consumed")
    assert calls[-1] == [12] and h.offset() == 14


def test_reconsume_times_grows_when_send_back_fails(tmp_path: Path) -> None:
    seen: list[int] = []

    def listener(msgs, ctx):
        seen.append(msgs[0].reconsume_times)
        return LATER

    h = Harness(tmp_path, listener, failing_back=[5])
    request = h.run(5)
    assert request.messages == [] and h.pq.held_offsets() == [5] and h.offset() == 5
    h.scheduler.run_all()
    wait_until(lambda: len(seen) >= 2, "the message consumed again")
    assert seen == [0, 1]


def test_ack_index_and_the_listeners_delay_level(tmp_path: Path) -> None:
    def listener(msgs, ctx: ConsumeConcurrentlyContext):
        ctx.ack_index = 1
        ctx.delay_level_when_next_consume = 5
        return OK

    h = Harness(tmp_path, listener)
    h.run(0, 1, 2, 3)
    assert h.sent_back == [(2, 5), (3, 5)] and h.offset() == 4


@pytest.mark.parametrize("outcome", ["raise", "none", "not a status"])
def test_exceptions_and_none_are_retried(tmp_path: Path, outcome: str) -> None:
    def listener(msgs, ctx):
        if outcome == "raise":
            raise RuntimeError("boom")
        return True if outcome == "not a status" else None

    h = Harness(tmp_path, listener)
    h.run(7)
    assert h.sent_back == [(7, 0)] and h.offset() == 8


def test_tv10_broadcasting_logs_and_drops(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="rmq.connector.consume_message_concurrently_service")
    h = Harness(tmp_path, lambda msgs, ctx: LATER, broadcasting=True)
    h.run(0, 1, 2, 3)
    assert h.sent_back == []
    assert caplog.text.count("BROADCASTING, the message consume failed, drop it") == 4
    assert h.offset() == 4


def test_tv13_a_success_past_the_consume_timeout_is_reported_and_still_commits(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """CONSUME_SUCCESS after the consume timeout classifies as TIME_OUT (logged), and the batch
    is still acknowledged: only a success within the timeout skips classify."""
    caplog.set_level(logging.INFO, logger="rmq.connector.consume_message_concurrently_service")
    h = Harness(tmp_path, lambda msgs, ctx: OK, consume_timeout_minutes=TINY_TIMEOUT_MINUTES)
    h.run(7)
    assert "consume TIME_OUT: CONSUME_SUCCESS, 1 messages" in caplog.text
    assert h.sent_back == [] and h.offset() == 8


def test_tv12_dropped_queue_keeps_the_offset(tmp_path: Path) -> None:
    called = []
    h = Harness(tmp_path, lambda msgs, ctx: called.append(1) or OK)
    h.pq.dropped = True
    h.run(3)
    assert called == [] and h.offset() == -1  # dropped before run: listener not called

    def drop_while_consuming(msgs, ctx):
        h2.pq.dropped = True
        return OK

    h2 = Harness(tmp_path / "2", drop_while_consuming)
    h2.run(3)
    assert h2.offset() == -1 and h2.pq.held_offsets() == [3]  # no ack, no offset update


def test_clean_expire_msg_sends_the_stuck_head_back_at_level_3(tmp_path: Path) -> None:
    h = Harness(tmp_path, lambda msgs, ctx: OK, consume_timeout_minutes=TINY_TIMEOUT_MINUTES)
    h.pq.put_message([message(1), message(2)])
    h.pq.mark_consume_started([message(1), message(2)])
    time.sleep(0.01)   # not an event: the consume start (real clock) lies in the past, past the 60 ns timeout
    h.service.clean_expire_msg([h.pq])
    assert h.sent_back == [(1, 3), (2, 3)] and h.pq.msg_count == 0


def test_tv12_a_pipelined_pull_landing_never_moves_the_offset_past_a_held_message(tmp_path: Path) -> None:
    """The next pull's batch lands while the first one's offset 5 is still being consumed: the
    committed offset stays at 5 however much of both batches finishes, then jumps past both."""
    h = Harness(tmp_path, lambda msgs, ctx: OK)
    first, second = [message(o) for o in range(32)], [message(o) for o in range(32, 64)]
    h.pq.put_message(first)
    h.pq.mark_pulled_until(32)
    for m in first[:5] + first[6:]:
        h.service.run(ConsumeRequest([m], h.pq, MQ))
    assert h.offset() == 5
    h.pq.put_message(second)
    h.pq.mark_pulled_until(64)
    for m in reversed(second):
        h.service.run(ConsumeRequest([m], h.pq, MQ))
        assert h.offset() == 5
    h.service.run(ConsumeRequest([first[5]], h.pq, MQ))
    assert h.offset() == 64 and h.pq.msg_count == 0


def test_batches_of_one_hand_every_message_to_the_listener_once(tmp_path: Path) -> None:
    seen: list[list[int]] = []
    h = Harness(tmp_path, lambda msgs, ctx: seen.append([m.queue_offset for m in msgs]) or OK,
                consume_message_batch_max_size=1)
    messages = [message(o) for o in range(32)]
    h.pq.put_message(messages)
    h.service.submit_consume_request(messages, h.pq, MQ)
    wait_until(lambda: h.offset() == 32, "all 32 consumed and committed")
    assert sorted(seen) == [[o] for o in range(32)] and h.pq.msg_count == 0


def test_slow_listeners_run_on_every_consume_thread_at_once(tmp_path: Path) -> None:
    """Batches of one message run on the pool's threads side by side: listeners that block do
    not hold the rest of the pull back (RocketMQ's consumeExecutor)."""
    all_running = threading.Barrier(4)

    def listener(msgs, ctx):
        all_running.wait(timeout=30)   # broken (an exception) unless 4 listeners run at once
        return OK

    h = Harness(tmp_path, listener)
    h.service.shutdown(0)
    service = ConsumeMessageConcurrentlyService(
        listener, ConsumerConfig("G", consume_thread_max=4), offset_store=h.store,
        send_message_back=h.send_back, scheduler=h.scheduler)
    service.start(lambda: [h.pq])
    messages = [message(o) for o in range(8)]
    h.pq.put_message(messages)
    service.submit_consume_request(messages, h.pq, MQ)
    wait_until(lambda: h.offset() == 8, "8 messages consumed, 4 at a time")
    service.shutdown(5)
    assert h.sent_back == [] and not all_running.broken
