"""A whole broker (BrokerController: real store, real gRPC server on a loopback port) running in
this test process on its own event-loop thread, so a test can look inside it (the hold table)
while talking to it over gRPC like any client."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import grpc

from rmq.broker_server.broker_controller import BrokerController
from rmq.broker_server.config import BrokerConfig
from rmq.broker_server.server_security import ServerSecurity

START_TIMEOUT_S = 30
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class InProcessBroker:
    def __init__(self, store_dir: Path, security: ServerSecurity | None = None, **settings: Any) -> None:
        self.address = f"127.0.0.1:{free_port()}"
        self.config = BrokerConfig(listen=self.address, store_dir=str(store_dir), **settings)
        self.controller = BrokerController(self.config, security or ServerSecurity())
        self._loop = asyncio.new_event_loop()
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
        self.controller.start_services()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float = START_TIMEOUT_S) -> T:
        """Run `coroutine` on the broker's event loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout_s)

    def stop(self) -> None:
        """Shut the broker down gracefully (once; later calls do nothing)."""
        if self._loop.is_closed():
            return
        if self._server is not None:
            asyncio.run_coroutine_threadsafe(self.controller.shutdown(self._server), self._loop).result(60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
