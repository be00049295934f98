"""ProcessQueue: the smallest-offset rule (spec consumer-pull-rebalance TV-12,
consumption-longpolling-offsets TV-8), span, size, idle expiry and consume-timeout lookup."""

from __future__ import annotations

from rmq.connector.process_queue import ProcessQueue
from tests.connector.sdk_support import message


def held(*offsets: int) -> ProcessQueue:
    pq = ProcessQueue()
    pq.put_message([message(o) for o in offsets])
    return pq


def test_tv12_batch_at_the_head_commits_the_next_held_offset() -> None:
    pq = held(10, 11, 12, 13)
    assert pq.remove_message([message(10), message(11)]) == 12


def test_tv12_a_later_batch_finishing_first_keeps_the_offset_at_the_pending_one() -> None:
    pq = held(10, 11, 12, 13)
    assert pq.remove_message([message(11), message(12)]) == 10


def test_tv12_emptied_queue_commits_max_put_offset_plus_one_and_empty_is_minus_one() -> None:
    pq = held(10, 11)
    assert pq.remove_message([message(10), message(11)]) == 12
    assert pq.remove_message([message(10)]) == -1


def test_longpolling_tv8_d_first_then_the_rest() -> None:
    pq = held(0, 1, 2, 3)
    assert pq.remove_message([message(3)]) == 0
    assert pq.remove_message([message(0), message(1), message(2)]) == 4


def test_count_size_span_and_duplicate_puts() -> None:
    pq = ProcessQueue()
    pq.put_message([message(5, b"abc"), message(9, b"de")])
    pq.put_message([message(9, b"de")])  # already held: skipped
    assert (pq.msg_count, pq.msg_size, pq.max_span()) == (2, 5, 4)
    pq.remove_message([message(5, b"abc")])
    assert (pq.msg_count, pq.msg_size, pq.max_span()) == (1, 2, 0)


def test_pull_expiry_after_120_s_idle() -> None:
    now = [1000.0]
    pq = ProcessQueue(clock=lambda: now[0])
    now[0] += 120.0
    assert not pq.is_pull_expired()
    now[0] += 0.01
    assert pq.is_pull_expired()


def test_expired_message_is_the_head_once_its_listener_ran_too_long() -> None:
    now = [0.0]
    pq = ProcessQueue(clock=lambda: now[0])
    pq.put_message([message(1), message(2)])
    assert pq.expired_message(60) is None  # not handed to a listener yet
    pq.mark_consume_started([message(1), message(2)])
    now[0] = 60.0
    assert pq.expired_message(60) is None
    now[0] = 60.5
    assert pq.expired_message(60).queue_offset == 1


def test_an_out_of_order_put_then_later_puts_keep_the_smallest_offset_rule() -> None:
    pq = ProcessQueue()
    pq.put_message([message(5)])
    pq.put_message([message(3), message(6), message(7)])   # 3 before what is held: the order is rebuilt
    assert pq.remove_message([message(3)]) == 5
    assert pq.remove_message([message(5)]) == 6
    assert pq.remove_message([message(7)]) == 6
    assert pq.max_span() == 0 and pq.remove_message([message(6)]) == 8
