"""The broker's event loop (broker_server/event_loop.py, issue 41): uvloop's when it is installed
and not turned off, asyncio's otherwise, and a whole broker serving single sends, pulls and
offsets over the remoting port and gRPC on each."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from rmq.broker_server import event_loop
from rmq.broker_server.event_loop import EVENT_LOOP_ENV, LoopKind, choose_loop
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.connector.message import decode_messages
from rmq.message_queue import MessageQueue
from tests.broker_server.in_process_broker import start_remoting_broker

uvloop = pytest.importorskip("uvloop")


def test_uvloop_runs_the_broker_when_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    kind, factory = choose_loop()
    assert kind is LoopKind.UVLOOP and factory is uvloop.new_event_loop


def test_asyncio_when_turned_off_or_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EVENT_LOOP_ENV, "asyncio")
    assert choose_loop() == (LoopKind.ASYNCIO, asyncio.new_event_loop)
    monkeypatch.delenv(EVENT_LOOP_ENV)
    monkeypatch.setitem(sys.modules, "uvloop", None)   # import uvloop raises ImportError
    assert choose_loop() == (LoopKind.ASYNCIO, asyncio.new_event_loop)


def test_run_serves_on_the_chosen_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[type] = []

    async def serve() -> None:
        seen.append(type(asyncio.get_running_loop()))

    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    assert event_loop.run(serve) is LoopKind.UVLOOP
    monkeypatch.setenv(EVENT_LOOP_ENV, "asyncio")
    assert event_loop.run(serve) is LoopKind.ASYNCIO
    assert seen[0] is uvloop.Loop and seen[1] is not uvloop.Loop


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
