"""Long polling on a real broker (spec consumer-pull-rebalance §14, TV-17): a held pull wakes
as soon as a matching message is dispatched, times out at its suspend timeout, ignores other
tags, and a thousand held pulls leave the broker responsive. The broker's fallback check runs
every 30 s here, so a pull answered within 1 s of the send was woken by the arrival itself."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from integration_tests.reliability.brokers import configured_broker
from integration_tests.reliability.resource_samples import scrape
from integration_tests.rmq_stubs import Stubs, decode, suspend_fields
from rmq.v1 import rmq_pb2
from testing import processes
from tests.waiting import wait_until

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)
FALLBACK_CHECK_MS = 30_000  # PullRequestHoldService's periodic check, far above WAKE_BOUND_S
WAKE_BOUND_S = 1.0
ANSWER_S = 10.0   # a held pull not answered by then fails the test (not after the 30 s fallback)


@pytest.fixture(scope="module")
def metrics() -> str:
    """The broker's Prometheus endpoint: its hold table (rmq_held_pulls) is observable there."""
    return f"127.0.0.1:{processes.free_port()}"


@pytest.fixture(scope="module")
def rmq(tmp_path_factory: pytest.TempPathFactory, metrics: str) -> Iterator[Stubs]:
    server = configured_broker(tmp_path_factory.mktemp("long-polling"),
                               hold_check_interval_ms=FALLBACK_CHECK_MS, metrics_listen=metrics).start()
    stubs = Stubs.connect(server.address)
    yield stubs
    stubs.close()
    assert server.stop() == 0


def wait_held(metrics: str, count: int) -> None:
    wait_until(lambda: scrape(metrics)["held_pulls"] == count, f"{count} pulls in the hold table",
               interval=0.05)


def held_pull(rmq: Stubs, topic: str, queue_id: int, offset: int, suspend_ms: int, sub_expression: str = "*"):
    request = rmq_pb2.PullMessageRequest(
        consumer_group="lp-group",
        topic=topic,
        queue_id=queue_id,
        queue_offset=offset,
        max_messages=32,
        **suspend_fields(suspend_ms, sub_expression),
    )
    return rmq.messaging.PullMessage.future(request, timeout=suspend_ms / 1000 + 30)


def test_held_pull_wakes_when_a_message_arrives(rmq: Stubs, metrics: str) -> None:
    rmq.create_topic("wake", queues=1)
    latencies = []
    for offset in range(5):
        pending = held_pull(rmq, "wake", 0, offset, suspend_ms=60000)
        wait_held(metrics, 1)
        assert not pending.done()
        sent_at = time.monotonic()
        assert rmq.send("wake", rmq_pb2.Message(body=b"m%d" % offset)).status.code == rmq_pb2.OK
        response = pending.result(timeout=ANSWER_S)
        latencies.append(time.monotonic() - sent_at)
        assert response.pull_status == rmq_pb2.FOUND
        assert [m.body for m in decode(response)] == [b"m%d" % offset]
        assert response.next_begin_offset == offset + 1
    log.info("long-poll wake after send ack: %s ms", [round(x * 1000, 2) for x in latencies])
    assert max(latencies) < WAKE_BOUND_S  # woken by the arrival, not by the 30 s fallback check


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


def test_tag_filtered_pull_ignores_other_tags(rmq: Stubs, metrics: str) -> None:
    rmq.create_topic("tagged", queues=1)
    pending = held_pull(rmq, "tagged", 0, 0, suspend_ms=15000, sub_expression="TagA")
    wait_held(metrics, 1)
    rmq.send("tagged", rmq_pb2.Message(body=b"other", tags="TagB"))
    time.sleep(0.3)   # an absence window, not an event: a pull woken by the other tag would be answered
    assert not pending.done()
    rmq.send("tagged", rmq_pb2.Message(body=b"mine", tags="TagA"))
    response = pending.result(timeout=ANSWER_S)
    assert response.pull_status == rmq_pb2.FOUND
    assert [m.body for m in decode(response)] == [b"mine"]
    assert response.next_begin_offset == 2


def test_thousand_held_pulls_leave_the_broker_responsive(rmq: Stubs, metrics: str) -> None:
    """The 1,000 pulls come over 10 connections of
    their own, the other RPCs over the fixture's."""
    rmq.create_topic("crowd", queues=1)
    rmq.create_topic("bystander", queues=1)
    crowds = [Stubs.connect(rmq.address, own_connection=True) for _ in range(10)]
    pending = [held_pull(crowds[n % 10], "crowd", 0, 0, suspend_ms=30000) for n in range(1000)]
    wait_held(metrics, 1000)
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
