"""SQL92 filters on the broker (issue #25 item 3): evaluated on the FilterExecutor's threads, never on
the event loop; one slice of filter work per read; accounts served in turn, so one account's
expensive filters delay another's filtered reads by at most one slice per account waiting."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import grpc
import pytest

from rmq import message_format as mf
from rmq.broker_server.errors import BrokerError
from rmq.broker_server.processors.filter_executor import (
    FILTER_SLICE_TOKENS,
    FilterExecutor,
    slice_evaluations,
)
from rmq.rocketmq_v2 import MessagingServiceStub
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from rmq.sql92 import compile_sql92
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from tests.broker_server import test_processors
from tests.broker_server.in_process_broker import InProcessBroker
from tests.broker_server.store_fixture import wait_dispatched
from tests.broker_server.test_processors import PEER, Broker, send
from tests.broker_server.test_sql92_pull import bodies, order, sql_pull
from tests.waiting import wait_until_async

broker = test_processors.broker
# 2,044 tokens: FILTER_SLICE_TOKENS // 2,044 = 8 records evaluated per read
COSTLY = "region IN (" + ",".join(["'eu'"] + ["1"] * 1019) + ")"


def threads_reading_properties(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads that read a record's properties (where a filter is evaluated)."""
    threads: list[str] = []
    record_properties = mf.record_properties

    def watched(record: bytes) -> dict[str, str]:
        threads.append(threading.current_thread().name)
        return record_properties(record)

    monkeypatch.setattr(mf, "record_properties", watched)
    return threads


def test_accounts_are_served_in_turn() -> None:
    """Five reads of one account are waiting when another account's read arrives: it runs after the
    first account's next slice, not after all five."""
    async def scenario() -> list[str]:
        filters = FilterExecutor(1)
        ran: list[str] = []
        started, gate = threading.Event(), threading.Event()

        def job(name: str, wait: bool = False):
            def run() -> str:
                if wait:
                    started.set()
                    gate.wait(10)
                ran.append(name)
                return name
            return run

        calls = [asyncio.ensure_future(filters.run("hog", job("h0", wait=True)))]
        assert await asyncio.to_thread(started.wait, 10)          # h0 runs on the only thread
        calls += [asyncio.ensure_future(filters.run("hog", job(f"h{n}"))) for n in range(1, 5)]
        await asyncio.sleep(0)
        calls.append(asyncio.ensure_future(filters.run("polite", job("p0"))))
        await asyncio.sleep(0)
        assert (filters.pending("hog"), filters.pending("polite")) == (4, 1)
        gate.set()
        assert await asyncio.wait_for(asyncio.gather(*calls), 10) == ["h0", "h1", "h2", "h3", "h4", "p0"]
        filters.shutdown()
        return ran

    assert asyncio.run(scenario()) == ["h0", "h1", "p0", "h2", "h3", "h4"]


def test_waiting_reads_are_bounded_per_account() -> None:
    async def scenario() -> None:
        filters = FilterExecutor(1, max_pending_per_account=2)
        started, gate = threading.Event(), threading.Event()
        running = asyncio.ensure_future(filters.run("a", lambda: started.set() or gate.wait(10)))
        assert await asyncio.to_thread(started.wait, 10)
        waiting = [asyncio.ensure_future(filters.run("a", lambda: "a")) for _ in range(2)]
        await asyncio.sleep(0)
        assert filters.pending("a") == 2
        with pytest.raises(BrokerError) as refused:
            await filters.run("a", lambda: None)
        assert refused.value.code == rmq_pb2.LIMIT_EXCEEDED
        assert "max_pending_filter_reads_per_account" in refused.value.message
        other = asyncio.ensure_future(filters.run("b", lambda: "b"))   # another account still queues
        gate.set()
        assert await asyncio.wait_for(asyncio.gather(running, *waiting, other), 10) == [True, "a", "a", "b"]
        filters.shutdown()

    asyncio.run(scenario())


def test_a_read_evaluates_one_slice_and_says_where_the_next_starts(broker: Broker) -> None:
    cost = compile_sql92(COSTLY).cost
    assert slice_evaluations(cost) == FILTER_SLICE_TOKENS // cost == 8
    send(broker, *[order("us", n) for n in range(20)], order("eu", 20))
    wait_dispatched(broker.store, "T", 0, 21)
    first = sql_pull(broker, 0, COSTLY)
    assert (first.pull_status, first.next_begin_offset) == (rmq_pb2.NO_MATCHED_MSG, 8)
    second = sql_pull(broker, 8, COSTLY)
    assert (second.pull_status, second.next_begin_offset) == (rmq_pb2.NO_MATCHED_MSG, 16)
    third = sql_pull(broker, 16, COSTLY)
    assert (third.pull_status, bodies(third), third.next_begin_offset) == (rmq_pb2.FOUND, [b"eu-20"], 21)


def test_a_woken_sql92_pull_is_filtered_off_the_event_loop(broker: Broker, monkeypatch) -> None:
    """A held pull woken by a few messages used to read them on the event loop, filter included."""
    threads = threads_reading_properties(monkeypatch)

    async def scenario() -> rmq_pb2.PullMessageResponse:
        broker.hold.start()
        held = asyncio.ensure_future(broker.pull.process(rmq_pb2.PullMessageRequest(
            consumer_group="G", topic="T", queue_id=0, queue_offset=0, max_messages=32,
            sys_flag=rmq_pb2.FLAG_SUSPEND, suspend_timeout_ms=10_000,
            sub_expression="region = 'eu'", expression_type=rmq_pb2.SQL92)))
        await wait_until_async(lambda: broker.hold.held_count() == 1, "the SQL92 pull is held")
        await broker.send.process(rmq_pb2.SendMessageRequest(topic="T", messages=[order("eu", 1)]), PEER)
        response = await asyncio.wait_for(held, 10)
        broker.hold.shutdown()
        return response

    response = asyncio.run(scenario())
    assert bodies(response) == [b"eu-1"]
    assert threads and all(name.startswith("filter-") for name in threads), threads


def test_a_rocketmq5_sql_receive_is_filtered_on_the_filter_threads(tmp_path: Path, monkeypatch) -> None:
    """RocketMQ 5 receives with an SQL filter evaluated it on the store executor's threads, which
    sends share, with no bound per read and no turn per account."""
    threads = threads_reading_properties(monkeypatch)
    running = InProcessBroker(tmp_path / "store").start()
    try:
        with grpc.insecure_channel(running.address) as channel:
            config = rmq_pb2.TopicConfig(topic_name="T", read_queue_nums=1, write_queue_nums=1, perm=6)
            assert rmq_pb2_grpc.AdminServiceStub(channel).CreateTopic(
                rmq_pb2.CreateTopicRequest(config=config), timeout=10).status.code == rmq_pb2.OK
            sent = rmq_pb2_grpc.MessagingServiceStub(channel).SendMessage(rmq_pb2.SendMessageRequest(
                topic="T", messages=[order("us", 1), order("eu", 2)]), timeout=10)
            assert sent.status.code == rmq_pb2.OK
            request = pb.ReceiveMessageRequest(
                group=v2.Resource(name="G"),
                message_queue=v2.MessageQueue(topic=v2.Resource(name="T"), id=-1),
                filter_expression=v2.FilterExpression(type=v2.SQL, expression="region = 'eu'"), batch_size=4)
            request.long_polling_timeout.FromSeconds(5)
            answers = list(MessagingServiceStub(channel).ReceiveMessage(request, timeout=30))
        assert [a.message.body for a in answers if a.HasField("message")] == [b"eu-2"]
        assert threads and all(name.startswith("filter-") for name in threads), threads
    finally:
        running.stop()
