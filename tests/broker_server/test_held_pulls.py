"""Held pulls on a whole broker (spec consumer-pull-rebalance §14, TV-17; longpolling §9), seen
from inside: a held pull is answered by the arrival notification, within a second of the send,
while the fallback check runs only every 30 s; it times out at its suspend timeout and ignores
other tags; a thousand held pulls leave the broker responsive; and a pull whose client goes
away (call cancelled, channel closed) leaves the broker's hold table instead of staying until
a message or its suspend timeout comes."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from tests.broker_server.in_process_broker import InProcessBroker
from tests.rmq_stubs import Stubs, decode, suspend_fields
from tests.waiting import wait_until

FALLBACK_CHECK_MS = 30_000      # PullRequestHoldService's periodic check, far above the bound below
WAKE_BOUND_S = 1.0
ANSWER_S = 10.0                 # a pull not answered by then fails the test (not after the fallback)
SUSPEND_MS = 60_000
TOPIC = "held"
log = logging.getLogger(__name__)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    broker = InProcessBroker(tmp_path / "store", hold_check_interval_ms=FALLBACK_CHECK_MS).start()
    with grpc.insecure_channel(broker.address) as channel:
        config = rmq_pb2.TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1, perm=6)
        created = rmq_pb2_grpc.AdminServiceStub(channel).CreateTopic(
            rmq_pb2.CreateTopicRequest(config=config), timeout=10)
        assert created.status.code == rmq_pb2.OK
    yield broker
    broker.stop()


@pytest.fixture
def rmq(broker: InProcessBroker) -> Iterator[Stubs]:
    stubs = Stubs.connect(broker.address)
    yield stubs
    stubs.close()


def wait_held(broker: InProcessBroker, count: int) -> None:
    hold = broker.controller.hold_service
    wait_until(lambda: hold.held_count() == count, f"{count} pulls in the hold table", interval=0.05)


def held_pull(channel: grpc.Channel, offset: int, topic: str = TOPIC, suspend_ms: int = SUSPEND_MS,
              sub_expression: str = "*") -> grpc.Future:
    """A pull of queue 0 of `topic` the broker may hold `suspend_ms`, not waited for."""
    request = rmq_pb2.PullMessageRequest(
        consumer_group="held-group", topic=topic, queue_id=0, queue_offset=offset, max_messages=32,
        **suspend_fields(suspend_ms, sub_expression))
    stub = rmq_pb2_grpc.MessagingServiceStub(channel)
    return stub.PullMessage.future(request, timeout=suspend_ms / 1000 + 30)


def test_held_pull_is_answered_by_the_arrival_not_the_fallback_check(broker: InProcessBroker) -> None:
    hold = broker.controller.hold_service
    with grpc.insecure_channel(broker.address) as channel:
        messaging = rmq_pb2_grpc.MessagingServiceStub(channel)
        for offset in range(5):
            pending = held_pull(channel, offset)
            wait_until(lambda: hold.held_count() == 1, "the pull is in the hold table")
            sent = messaging.SendMessage(rmq_pb2.SendMessageRequest(
                topic=TOPIC, messages=[rmq_pb2.Message(body=b"m%d" % offset)]), timeout=10)
            assert sent.status.code == rmq_pb2.OK
            sent_at = time.monotonic()
            wait_until(pending.done, "held pull answered: not woken by the arrival (fallback check every "
                       f"{FALLBACK_CHECK_MS / 1000:.0f} s)", timeout=ANSWER_S)
            response = pending.result()
            waited = time.monotonic() - sent_at
            assert response.pull_status == rmq_pb2.FOUND and response.next_begin_offset == offset + 1
            assert [m.body for m in decode(response)] == [b"m%d" % offset]
            assert waited < WAKE_BOUND_S, (
                f"held pull answered {waited:.1f} s after the send: not woken by the arrival "
                f"(fallback check every {FALLBACK_CHECK_MS / 1000:.0f} s)")
            assert hold.held_count() == 0


@pytest.mark.parametrize("goes_away", ["cancels the call", "closes its channel"])
def test_pulls_whose_client_goes_away_leave_the_hold_table(broker: InProcessBroker, goes_away: str) -> None:
    hold = broker.controller.hold_service
    channel = grpc.insecure_channel(broker.address)
    pending = [held_pull(channel, 0) for _ in range(5)]
    wait_until(lambda: hold.held_count() == 5, "5 pulls in the hold table")
    if goes_away == "cancels the call":
        for call in pending:
            call.cancel()
    channel.close()
    wait_until(lambda: hold.held_count() == 0,
               f"a client that {goes_away} leaves no held pull behind (table holds {hold.held_count()})")
    # the broker still holds and wakes new pulls afterwards
    with grpc.insecure_channel(broker.address) as other:
        again = held_pull(other, 0)
        wait_until(lambda: hold.held_count() == 1, "a new pull is held")
        rmq_pb2_grpc.MessagingServiceStub(other).SendMessage(rmq_pb2.SendMessageRequest(
            topic=TOPIC, messages=[rmq_pb2.Message(body=b"after")]), timeout=10)
        assert again.result(timeout=10).pull_status == rmq_pb2.FOUND


def test_held_pull_times_out_with_no_new_msg(rmq: Stubs) -> None:
    rmq.create_topic("quiet", queues=1)
    started = time.monotonic()
    response = rmq.pull("quiet", 0, 0, **suspend_fields(600))
    elapsed = time.monotonic() - started
    log.info("suspend timeout 600 ms answered after %.0f ms", elapsed * 1000)
    assert response.pull_status == rmq_pb2.NO_NEW_MSG
    assert response.store_status == rmq_pb2.GMS_NO_MATCHED_LOGIC_QUEUE
    assert elapsed >= 0.55
    immediate = rmq.pull("quiet", 0, 0)  # no FLAG_SUSPEND: answered at once
    assert immediate.pull_status == rmq_pb2.NO_NEW_MSG


def test_tag_filtered_pull_ignores_other_tags(rmq: Stubs, broker: InProcessBroker) -> None:
    rmq.create_topic("tagged", queues=1)
    pending = held_pull(rmq.channel, 0, "tagged", suspend_ms=15000, sub_expression="TagA")
    wait_held(broker, 1)
    rmq.send("tagged", rmq_pb2.Message(body=b"other", tags="TagB"))
    time.sleep(0.3)   # an absence window, not an event: a pull woken by the other tag would be answered
    assert not pending.done()
    rmq.send("tagged", rmq_pb2.Message(body=b"mine", tags="TagA"))
    response = pending.result(timeout=ANSWER_S)
    assert response.pull_status == rmq_pb2.FOUND
    assert [m.body for m in decode(response)] == [b"mine"]
    assert response.next_begin_offset == 2


def test_thousand_held_pulls_leave_the_broker_responsive(rmq: Stubs, broker: InProcessBroker) -> None:
    """The 1,000 pulls come over 10 connections of
    their own, the other RPCs over the fixture's."""
    rmq.create_topic("crowd", queues=1)
    rmq.create_topic("bystander", queues=1)
    crowds = [Stubs.connect(rmq.address, own_connection=True) for _ in range(10)]
    pending = [held_pull(crowds[n % 10].channel, 0, "crowd", suspend_ms=30000) for n in range(1000)]
    wait_held(broker, 1000)
    assert not any(p.done() for p in pending)
    started = time.monotonic()
    assert rmq.route.ListBrokers(rmq_pb2.ListBrokersRequest(), timeout=5).status.code == rmq_pb2.OK
    assert rmq.send("bystander", rmq_pb2.Message(body=b"x")).status.code == rmq_pb2.OK
    assert rmq.pull("bystander", 0, 0, timeout=5).status.code == rmq_pb2.OK
    log.info("3 RPCs beside 1000 held pulls took %.1f ms", (time.monotonic() - started) * 1000)
    sent_at = time.monotonic()
    rmq.send("crowd", rmq_pb2.Message(body=b"for everyone"))
    statuses = {p.result(timeout=ANSWER_S).pull_status for p in pending}
    log.info("1000 held pulls answered %.1f ms after the send", (time.monotonic() - sent_at) * 1000)
    for crowd in crowds:
        crowd.close()
    assert statuses == {rmq_pb2.FOUND}
