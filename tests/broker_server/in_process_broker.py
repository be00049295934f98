"""A whole broker (BrokerController: real store, real gRPC server on a loopback port) running in
this test process on its own event-loop thread, so a test can look inside it (the hold table)
while talking to it over gRPC like any client."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc

from rmq.broker_server.broker_controller import BrokerController
from rmq.broker_server.config import BrokerConfig
from rmq.broker_server.errors import UserError
from rmq.broker_server.security.server_security import ServerSecurity
from testing.processes import free_port

START_TIMEOUT_S = 30
T = TypeVar("T")


class InProcessBroker:
    def __init__(self, store_dir: Path, security: ServerSecurity | None = None,
                 clock: Callable[[], float] = time.time,
                 loop_factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop,
                 **settings: Any) -> None:
        """`clock`: the broker's wall clock for delay levels and RocketMQ 5 invisibility
        (tests.clocks.ManualClock: a test moves time instead of waiting it out); `loop_factory`:
        the event loop it runs on (rmq.event_loop makes the servers')."""
        self.address = f"127.0.0.1:{free_port()}"
        config = BrokerConfig(listen=self.address, store_dir=str(store_dir), **settings)
        self.controller = BrokerController(config, security or ServerSecurity(), clock)
        self.config = self.controller.config   # the remoting port bound (an ephemeral one resolved)
        self._loop = loop_factory()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: grpc.aio.Server | None = None

    def start(self) -> InProcessBroker:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(START_TIMEOUT_S)
        return self

    async def _start(self) -> None:
        self.controller.load()
        self._server = self.controller.build_server()
        await self._server.start()
        await self.controller.start_remoting()
        self.controller.start_services()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float = START_TIMEOUT_S) -> T:
        """Run `coroutine` on the broker's event loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Start `coroutine` on the broker's event loop without waiting for it."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    def stop(self) -> None:
        """Shut the broker down gracefully (once; later calls do nothing)."""
        if self._loop.is_closed():
            return
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self.controller.shutdown(self._server), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


BIND_ATTEMPTS = 5


def start_remoting_broker(store_dir: Path, **settings: Any) -> InProcessBroker:
    """An in-process broker serving the remoting protocol on a fixed port, as a deployment for 4.x
    clients gives it (records then name it as their store host, where 4.x consumers send a message
    back), started again on another port when the one picked was taken meanwhile."""
    for attempt in range(BIND_ATTEMPTS):
        try:
            return InProcessBroker(store_dir, remoting_listen=f"127.0.0.1:{free_port()}", **settings).start()
        except UserError:   # the port was taken between free_port() and the bind
            if attempt == BIND_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


@contextlib.contextmanager
def running_broker(store_dir: Path, **settings: Any) -> Iterator[InProcessBroker]:
    """An InProcessBroker started for the block and stopped after it, whatever happens."""
    broker = InProcessBroker(store_dir, **settings).start()
    try:
        yield broker
    finally:
        broker.stop()
