"""PullResponseBudget: pulls over a real store shrink to what is left of their connection's and
the broker's budget, are refused LIMIT_EXCEEDED naming the setting when nothing is left, and hold
their answer's bytes until their call ends."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from rmq.broker_server.config import BrokerConfig
from rmq.broker_server.errors import UserError
from rmq.broker_server.processors.pull_response_budget import PullBytesLease, PullHolder, PullResponseBudget
from rmq.broker_server.processors.topic_config_manager import TopicConfig
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.message_queue import MessageQueue
from rmq.rocketmq_v2 import MessagingServiceStub
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from rmq.v1 import rmq_pb2
from tests.broker_server.in_process_broker import InProcessBroker
from tests.broker_server.store_fixture import running_store, wait_dispatched
from tests.broker_server.test_processors import Broker, send
from tests.waiting import wait_until, wait_until_async

BODY = 3000
MESSAGES = 8


@dataclass
class Call:
    """What the budget needs of a grpc.aio call: its peer and its done callbacks."""

    address: str
    callbacks: list[Callable[[Any], None]] = field(default_factory=list)

    def peer(self) -> str:
        return self.address

    def add_done_callback(self, callback: Callable[[Any], None]) -> None:
        self.callbacks.append(callback)

    def end(self) -> None:
        for callback in self.callbacks:
            callback(self)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    with running_store(tmp_path / "store") as store:
        broker = Broker(store, tmp_path)
        broker.topics.create(TopicConfig("T", 1, 1))
        send(broker, *(rmq_pb2.Message(body=bytes([n]) * BODY) for n in range(MESSAGES)))
        wait_dispatched(store, "T", 0, MESSAGES)
        yield broker
        broker.executor.shutdown()


def record_size(broker: Broker) -> int:
    """One stored message's answer bytes: its record and its size."""
    unbounded = PullBytesLease(PullResponseBudget(1 << 30, 1 << 30), PullHolder("", "c"))
    return len(pull(broker, unbounded, max_messages=1).messages.records) + 4


def pull(broker: Broker, lease: PullBytesLease, max_messages: int = 100) -> rmq_pb2.PullMessageResponse:
    request = rmq_pb2.PullMessageRequest(consumer_group="G", topic="T", queue_id=0, queue_offset=0,
                                         max_messages=max_messages, max_bytes=1 << 20)
    return asyncio.run(broker.pull.process(request, lease=lease))


def test_pulls_shrink_to_the_budget_and_are_refused_past_it(broker: Broker) -> None:
    size = record_size(broker)
    budget = PullResponseBudget(max_bytes=5 * size, max_bytes_per_connection=3 * size, max_wait_s=0)
    a1, a2, a3, b1 = (budget.lease(Call(peer)) for peer in ("ipv4:a", "ipv4:a", "ipv4:a", "ipv4:b"))

    assert pull(broker, a1, max_messages=2).messages.count == 2
    assert pull(broker, a2).messages.count == 1           # what is left of connection a's 3 messages
    refused = pull(broker, a3)
    assert refused.status.code == rmq_pb2.LIMIT_EXCEEDED
    assert "max_inflight_pull_bytes_per_connection" in refused.status.message
    assert pull(broker, b1).messages.count == 2           # what is left of the broker's 5
    assert budget.held == 5 * size and a1.held == 2 * size

    refused = pull(broker, budget.lease(Call("ipv4:c")))
    assert refused.status.code == rmq_pb2.LIMIT_EXCEEDED
    assert "(max_inflight_pull_bytes)" in refused.status.message


def test_an_account_holds_at_most_its_share_on_all_its_connections(broker: Broker) -> None:
    """Issue 39 High 3: the connections of one account together hold at most
    max_inflight_pull_bytes_per_account; another account's pulls get the rest."""
    size = record_size(broker)
    budget = PullResponseBudget(max_bytes=8 * size, max_bytes_per_connection=8 * size, max_wait_s=0,
                                max_bytes_per_account=3 * size)
    # without an ACL the account is the client's IP: two connections of 10.0.0.1, one of 10.0.0.2
    a1, a2, a3 = (budget.lease(Call(f"ipv4:10.0.0.1:{port}")) for port in (1, 2, 3))
    assert pull(broker, a1, max_messages=2).messages.count == 2
    assert pull(broker, a2).messages.count == 1           # what is left of the account's 3
    refused = pull(broker, a3)
    assert refused.status.code == rmq_pb2.LIMIT_EXCEEDED
    assert "this account" in refused.status.message
    assert "(max_inflight_pull_bytes_per_account)" in refused.status.message
    assert budget.account_held("10.0.0.1") == 3 * size
    assert pull(broker, budget.lease(Call("ipv4:10.0.0.2:1"))).messages.count == 3   # its own share
    assert budget.held == 6 * size


def test_an_ended_call_gives_its_bytes_back(broker: Broker) -> None:
    size = record_size(broker)
    budget = PullResponseBudget(max_bytes=4 * size, max_bytes_per_connection=4 * size, max_wait_s=0)
    call = Call("ipv4:a")
    assert pull(broker, budget.lease(call)).messages.count == 4
    assert pull(broker, budget.lease(Call("ipv4:a"))).status.code == rmq_pb2.LIMIT_EXCEEDED
    call.end()
    assert budget.held == 0
    assert pull(broker, budget.lease(Call("ipv4:b"))).messages.count == 4


def test_at_least_one_message_however_little_is_left(broker: Broker) -> None:
    size = record_size(broker)
    budget = PullResponseBudget(max_bytes=10 * size, max_bytes_per_connection=size + size // 2)
    assert pull(broker, budget.lease(Call("ipv4:a"))).messages.count == 1
    assert pull(broker, budget.lease(Call("ipv4:a"))).messages.count == 1   # half a message left
    assert budget.held == 2 * size


def test_a_call_ended_during_its_read_holds_nothing() -> None:
    budget = PullResponseBudget(max_bytes=100, max_bytes_per_connection=100)
    call = Call("ipv4:a")
    lease = budget.lease(call)
    granted = asyncio.run(lease.grant(80))
    call.end()
    lease.settle(granted, 90)
    assert budget.held == 0 and lease.held == 0
    assert asyncio.run(budget.lease(Call("ipv4:a")).grant(1000)) == 100


def test_a_pull_past_the_budget_waits_for_bytes_to_come_back() -> None:
    async def scenario() -> None:
        budget = PullResponseBudget(max_bytes=100, max_bytes_per_connection=100, max_wait_s=5)
        first = Call("ipv4:a")
        await budget.lease(first).grant(100)
        waiting = asyncio.create_task(budget.lease(Call("ipv4:b")).grant(60))
        await wait_until_async(lambda: budget._waiting == 1, "the second pull waits for bytes")
        assert not waiting.done()
        first.end()
        assert await waiting == 60 and budget.held == 60

    asyncio.run(scenario())


def test_bytes_taken_and_given_back_on_another_thread_wake_a_waiting_pull() -> None:
    """The Flight data plane's stream threads take and give back their batches' bytes directly
    (try_reserve, give_back): a pull waiting on the event loop is woken by bytes a stream thread
    gives back, however long its own wait could last."""
    async def scenario() -> None:
        budget = PullResponseBudget(max_bytes=100, max_bytes_per_connection=100, max_wait_s=3600)
        taken: list[int | None] = []
        flight_a = PullHolder("a", "flight a")
        stream = threading.Thread(target=lambda: taken.extend([budget.try_reserve(flight_a, 100),
                                                               budget.try_reserve(flight_a, 1)]))
        stream.start()
        await asyncio.to_thread(stream.join)
        assert taken == [100, None] and budget.held == 100    # nothing left: None, no wait
        waiting = asyncio.create_task(budget.lease(Call("ipv4:b")).grant(60))
        await wait_until_async(lambda: budget._waiting == 1, "the pull waits for bytes")
        giver = threading.Thread(target=budget.give_back, args=(flight_a, 100))
        giver.start()
        await asyncio.to_thread(giver.join)
        await wait_until_async(waiting.done, "the pull is woken by the bytes the stream gave back")
        assert waiting.result() == 60 and budget.held == 60

    asyncio.run(scenario())


def test_every_pull_rpc_is_cut_to_its_connection_budget_and_gives_it_back(tmp_path: Path) -> None:
    """rmq.v1 PullMessage, v2 ReceiveMessage (pop) and v2 PullMessage over real gRPC: a batch is cut
    to the connection's budget, and the bytes come back once the call ends."""
    broker = InProcessBroker(tmp_path / "broker").start()
    try:
        with RmqClient(broker.address) as client:
            client.create_topic("T", queues=1)
            client.send("T", [OutgoingMessage(b"x" * BODY) for _ in range(MESSAGES)])
            mq = MessageQueue("T", "broker-a", 0)
            record = len(client.pull(mq, 0, 1, group="G").messages.records)
            budget = broker.controller.pull_processor.budget
            budget.max_bytes_per_connection = 3 * (record + 4)
            assert client.pull(mq, 0, 100, group="G").messages.count == 3
        with grpc.insecure_channel(broker.address) as channel:
            stub = MessagingServiceStub(channel)
            queue = v2.MessageQueue(topic=v2.Resource(name="T"), id=0)
            received = [r for r in stub.ReceiveMessage(pb.ReceiveMessageRequest(
                group=v2.Resource(name="popper"), message_queue=queue, batch_size=32,
                long_polling_timeout=Duration(seconds=0)), timeout=10) if r.HasField("message")]
            assert len(received) == 3
            pulled = [r for r in stub.PullMessage(pb.PullMessageRequest(
                group=v2.Resource(name="puller"), message_queue=queue, offset=0, batch_size=32), timeout=10)
                if r.HasField("message")]
            assert len(pulled) == 3
        # the done callbacks run just after the answers
        wait_until(lambda: budget.held == 0, lambda: f"the bytes given back (still held: {budget.held})")
    finally:
        broker.stop()


@pytest.mark.parametrize("share", ["max_inflight_pull_bytes_per_connection",
                                   "max_inflight_pull_bytes_per_account"])
def test_a_share_above_the_total_is_refused_naming_it(share: str) -> None:
    config = BrokerConfig(**{share: BrokerConfig().max_inflight_pull_bytes + 1})
    with pytest.raises(UserError, match=f"{share} must not be larger than max_inflight_pull_bytes"):
        config.validate()


def test_the_account_share_is_half_the_total_unless_set() -> None:
    lowered = BrokerConfig(max_inflight_pull_bytes=32 << 20, max_inflight_pull_bytes_per_connection=8 << 20)
    lowered.validate()
    assert lowered.pull_bytes_per_account == 16 << 20
    assert BrokerConfig(max_inflight_pull_bytes_per_account=1 << 20).pull_bytes_per_account == 1 << 20
