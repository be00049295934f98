"""A slave promoted by the controller serves as master without waiting on peers it cannot reach
(issue 47: in the chaos runs' bridge the promoted slave spent 3 s ending its slave term, on an
UnregisterBroker to a name server the cut had isolated). Its old master and one of its name
servers here are a blackhole: a port that accepts connections and never answers."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.broker_server.config import BrokerConfig
from rmq.broker_server.name_server.broker_outer_api import REQUEST_TIMEOUT_SECONDS
from rmq.broker_server.name_server.namesrv_controller import RouteInfoManager
from rmq.broker_server.replication.replicas_manager import ReplicasManager
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.v1 import rmq_pb2
from testing.processes import free_port
from tests.broker_server.in_process_broker import InProcessBroker
from tests.broker_server.test_name_server import serve_name_server
from tests.waiting import wait_until

CONTROLLER = "127.0.0.1:1000"   # never dialled: the test answers the heartbeats
MEMBER_ID = 1


@pytest.fixture
def blackhole() -> Iterator[socket.socket]:
    """A listener that never accepts: connects complete, no call is ever answered (closing it
    resets them)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener


def create_topic(store: Path, topic: str) -> None:
    """`topic` exists in the member's store before its terms begin."""
    seed = InProcessBroker(store).start()
    try:
        with RmqClient(seed.address) as client:
            client.create_topic(topic, queues=1)
    finally:
        seed.stop()


def test_a_promoted_slave_serves_as_master_at_once_and_unregisters_only_when_it_stops(
        tmp_path: Path, blackhole: socket.socket) -> None:
    """Promoted while its old master and a name server blackhole, the member serves as master
    well within the name server call timeout it used to wait out (3.03 s with the term's end
    unregistering); the reachable name server names it master of the new epoch, and forgets it
    only when the process is told to stop."""
    unreachable = f"127.0.0.1:{blackhole.getsockname()[1]}"
    store = tmp_path / "store"
    create_topic(store, "T")
    address = f"127.0.0.1:{free_port()}"
    routes = RouteInfoManager()
    promote = threading.Event()
    promoted_at: list[float] = []   # when a heartbeat first answered "this member is master of epoch 2"

    async def answer(*_: object) -> rmq_pb2.ControllerHeartbeatResponse:
        ok = rmq_pb2.Status(code=rmq_pb2.OK)
        if not promote.is_set():
            return rmq_pb2.ControllerHeartbeatResponse(status=ok, epoch=1, master_broker_id=0,
                                                       master_address=unreachable, truncate_to=-1)
        promoted_at.append(time.monotonic())
        return rmq_pb2.ControllerHeartbeatResponse(status=ok, epoch=2, master_broker_id=MEMBER_ID,
                                                   master_address=address, truncate_to=-1)

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    reachable = asyncio.run_coroutine_threadsafe(serve_name_server(routes, "127.0.0.1:0"), loop).result(30)
    config = BrokerConfig(controller=CONTROLLER, store_dir=str(store), listen=address, broker_id=MEMBER_ID,
                          namesrv=f"{unreachable},127.0.0.1:{reachable.port}",
                          controller_heartbeat_interval_ms=20, flight_listen="off", remoting_listen="off")

    async def open_manager() -> ReplicasManager:   # its channels belong to the loop serving the terms
        return ReplicasManager(config, ServerSecurity())

    manager = asyncio.run_coroutine_threadsafe(open_manager(), loop).result(30)
    manager.heartbeat = answer  # type: ignore[method-assign]
    terminated: asyncio.Future[None] = loop.create_future()

    async def serve_terms() -> None:
        try:
            while not terminated.done():
                await manager.serve_term(terminated)
        finally:
            await manager.close()

    served = asyncio.run_coroutine_threadsafe(serve_terms(), loop)

    def registered(role: rmq_pb2.BrokerRole, epoch: int) -> bool:
        return any((m.broker_id, m.role, m.epoch) == (MEMBER_ID, role, epoch) for m in routes.live_brokers())

    try:
        wait_until(lambda: registered(rmq_pb2.SLAVE, 1), "the member serves epoch 1 as a slave")
        promote.set()
        wait_until(lambda: registered(rmq_pb2.ASYNC_MASTER, 2), "the member serves epoch 2 as master")
        took = time.monotonic() - promoted_at[0]
        with RmqClient(address) as client:
            client.send("T", [OutgoingMessage(b"to the new master")])
        assert took < REQUEST_TIMEOUT_SECONDS / 2, f"served as master {took:.2f} s after the promotion"
        blackhole.close()   # the stop's unregistration is refused at once instead of timing out
        loop.call_soon_threadsafe(terminated.cancel)
        served.result(30)
        assert routes.live_brokers() == []   # a stopping member unregisters
    finally:
        loop.call_soon_threadsafe(terminated.cancel)
        asyncio.run_coroutine_threadsafe(reachable.server.stop(None), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
