"""Held pulls on a whole broker (spec consumer-pull-rebalance §14, TV-17; longpolling §9), seen
from inside: a held pull is answered by the arrival notification, within a second of the send,
while the fallback check runs only every 30 s; and a pull whose client goes away (call
cancelled, channel closed) leaves the broker's hold table instead of staying until a message
or its suspend timeout comes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from tests.broker_server.in_process_broker import InProcessBroker
from tests.waiting import wait_until

FALLBACK_CHECK_MS = 30_000      # PullRequestHoldService's periodic check, far above the bound below
WAKE_BOUND_S = 1.0
ANSWER_S = 10.0                 # a pull not answered by then fails the test (not after the fallback)
SUSPEND_MS = 60_000
TOPIC = "held"


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


def held_pull(channel: grpc.Channel, offset: int) -> grpc.Future:
    request = rmq_pb2.PullMessageRequest(
        consumer_group="held-group", topic=TOPIC, queue_id=0, queue_offset=offset, max_messages=32,
        sys_flag=rmq_pb2.FLAG_SUSPEND, suspend_timeout_ms=SUSPEND_MS, sub_expression="*")
    stub = rmq_pb2_grpc.MessagingServiceStub(channel)
    return stub.PullMessage.future(request, timeout=SUSPEND_MS / 1000 + 30)


def test_held_pull_is_answered_by_the_arrival_not_the_fallback_check(broker: InProcessBroker) -> None:
    hold = broker.controller.hold_service
    with grpc.insecure_channel(broker.address) as channel:
        messaging = rmq_pb2_grpc.MessagingServiceStub(channel)
        for offset in range(3):
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
