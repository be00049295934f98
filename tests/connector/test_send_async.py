"""Producer.send_async (RocketMQ's sendAsync): many
single-message sends in flight from one thread, each answered with the SendResult `send`
gives, awaitable in asyncio code on uvloop's loop and on asyncio's own, over the remoting port
and over gRPC, with send's errors and retries."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import cast

import pytest

from rmq import event_loop
from rmq.connector import Message, Producer, RmqRefused, RmqUnavailable
from rmq.connector.client import OutgoingMessage, QueueData, RmqClient, RmqError, TopicRoute
from rmq.connector.client import SendResult as ClientSendResult
from rmq.connector.message import decode_messages
from rmq.topic_config import TopicConfig
from tests.broker_server.in_process_broker import InProcessBroker

TOPIC = "async-t"
IN_FLIGHT = 600   # more than one connection carries at once: send_async waits for room


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    broker = InProcessBroker(tmp_path_factory.mktemp("async")).start()
    broker.controller.topics.create(TopicConfig(TOPIC, 2, 2))
    yield broker
    broker.stop()


def remoting_used(client: RmqClient) -> bool:
    return any(not c.closed for c in client._remoting._connections.values())


def test_many_sends_in_flight_are_each_stored_once_in_queue_order(broker: InProcessBroker) -> None:
    with Producer(broker.address) as producer:
        futures = [producer.send_async(Message(TOPIC, f"m{i}".encode())) for i in range(IN_FLIGHT)]
        results = [f.result(timeout=30) for f in futures]
        assert remoting_used(producer.client)
    by_queue: dict[int, list[int]] = {}
    for result in results:
        by_queue.setdefault(result.message_queue.queue_id, []).append(result.queue_offset)
    assert len({r.msg_id for r in results}) == IN_FLIGHT
    for offsets in by_queue.values():    # every offset once: nothing lost, nothing twice
        assert sorted(offsets) == list(range(min(offsets), min(offsets) + len(offsets)))
    first = results[0]
    pulled = producer_pull(broker, first.message_queue.queue_id, first.queue_offset)
    assert pulled == b"m0"


def producer_pull(broker: InProcessBroker, queue_id: int, offset: int) -> bytes:
    with RmqClient(broker.address) as client:
        mq = client.route(TOPIC).message_queues[queue_id]
        [message] = decode_messages(client.pull(mq, offset, 1, group="g").messages, mq)
        return message.body


@pytest.mark.parametrize("uvloop", [True, False], ids=["uvloop", "asyncio"])
def test_awaited_sends_on_either_event_loop(broker: InProcessBroker, uvloop: bool,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.UVLOOP_ENV, "1" if uvloop else "0")

    async def main() -> tuple[str, list[int]]:
        with Producer(broker.address) as producer:
            results = await asyncio.gather(*(producer.send_async(Message(TOPIC, b"a")) for _ in range(50)))
        return event_loop.loop_name(asyncio.get_running_loop()), [r.queue_offset for r in results]

    loop, offsets = event_loop.run(main())
    assert loop == ("uvloop" if uvloop else "asyncio")
    assert len(offsets) == 50 and all(offset >= 0 for offset in offsets)


def test_without_uvloop_the_loop_is_asyncios(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)   # as if it were not installed
    monkeypatch.delenv(event_loop.UVLOOP_ENV, raising=False)
    assert event_loop.run(_loop_name()) == "asyncio"


async def _loop_name() -> str:
    return event_loop.loop_name(asyncio.get_running_loop())


def test_over_grpc_when_the_remoting_port_is_unreachable(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path / "store").start()
    try:
        broker.controller.topics.create(TopicConfig(TOPIC, 2, 2))
        assert broker.controller.remoting is not None
        broker.run(broker.controller.remoting.stop())
        with Producer(broker.address) as producer:
            results = [f.result(timeout=30) for f in [producer.send_async(Message(TOPIC, b"g"))
                                                      for _ in range(20)]]
            assert not remoting_used(producer.client)
        assert len({r.msg_id for r in results}) == 20
    finally:
        broker.stop()


def test_a_refusal_is_the_futures_error_and_bad_input_fails_at_once(broker: InProcessBroker) -> None:
    with Producer(broker.address, retry_times_when_send_failed=0) as producer:
        failed = producer.send_async(Message("no-such-topic", b"x")).exception(timeout=30)
        assert isinstance(failed, RmqRefused) and failed.code_name == "TOPIC_NOT_EXIST"
        with pytest.raises(ValueError, match="body"):
            producer.send_async(Message(TOPIC, b""))


class FirstBrokerDown:
    """A client whose broker-a does not answer and broker-b stores: the async retry's path."""

    def __init__(self) -> None:
        self.tried: list[str] = []

    def route(self, topic: str) -> TopicRoute:
        return TopicRoute(topic, {"broker-a": "a:1", "broker-b": "b:1"},
                          (QueueData("broker-a", 1, 1, 6), QueueData("broker-b", 1, 1, 6)), ())

    def send_async(self, topic: str, message: OutgoingMessage, broker_name: str,
                   done: Callable[[ClientSendResult | None, RmqError | None], None]) -> None:
        self.tried.append(broker_name)
        if broker_name == "broker-a":
            done(None, RmqUnavailable("no answer in time", broker=broker_name))
        else:
            done(ClientSendResult(["id-1"], [0], [41], broker_name), None)


def test_a_failed_async_send_is_retried_on_another_broker() -> None:
    client = FirstBrokerDown()
    with Producer("127.0.0.1:1", client=cast(RmqClient, client)) as producer:
        for _ in range(4):
            result = producer.send_async(Message(TOPIC, b"x")).result(timeout=30)
            assert (result.message_queue.broker_name, result.queue_offset) == ("broker-b", 41)
    assert "broker-a" in client.tried
