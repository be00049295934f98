"""The broker on each event loop (issue 41; rmq.event_loop chooses): `rmq broker`'s entry runs its
server on uvloop when installed and on asyncio's loop with RMQ_UVLOOP=0, and a whole broker serves
single sends over the remoting port, batches over gRPC and pulls on either."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pytest

from rmq.broker_server.rmq_v1.grpc_server import run_until_terminated
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.connector.message import decode_messages
from rmq.event_loop import UVLOOP_ENV, loop_name
from rmq.message_queue import MessageQueue
from tests.broker_server.in_process_broker import start_remoting_broker

uvloop = pytest.importorskip("uvloop")


def test_the_servers_run_on_uvloop_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    async def serve() -> None:
        seen.append(loop_name(asyncio.get_running_loop()))

    monkeypatch.delenv(UVLOOP_ENV, raising=False)
    assert run_until_terminated(serve) == 0
    monkeypatch.setenv(UVLOOP_ENV, "0")
    assert run_until_terminated(serve) == 0
    assert seen == ["uvloop", "asyncio"]


@pytest.mark.parametrize("loop_factory", [asyncio.new_event_loop, uvloop.new_event_loop],
                         ids=["asyncio", "uvloop"])
def test_a_broker_serves_on_each_loop(tmp_path: Path, loop_factory: Callable[[], asyncio.AbstractEventLoop]
                                      ) -> None:
    broker = start_remoting_broker(tmp_path, loop_factory=loop_factory)
    try:
        with RmqClient(broker.address) as client:
            client.create_topic("t", queues=1)
            sent = [client.send("t", [OutgoingMessage(f"m{i}".encode())]) for i in range(3)]   # remoting
            client.send("t", [OutgoingMessage(b"m3"), OutgoingMessage(b"m4")])   # gRPC: a batch
            assert [result.queue_offsets for result in sent] == [[0], [1], [2]]
            remoting = broker.controller.remoting
            assert remoting is not None and remoting.channels   # the single sends came over it
            mq = MessageQueue("t", broker.config.broker_name, 0)
            pulled = client.pull(mq, 0, 16, group="g")
            bodies = [m.body for m in decode_messages(pulled.messages, mq)]
            assert bodies == [f"m{i}".encode() for i in range(5)]
    finally:
        broker.stop()
