"""The remoting port's bounds on what one client makes the broker hold: a connection past its
requests or request bytes is not read (its transport paused: what the client sends on stays in the
sockets' buffers, not in the broker) and is read again when its requests finish; a client that does
not read its answers makes the broker's answers wait, not pile up."""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from rmq.broker_server.remoting.remoting_server import CallContext, RemotingLimits, RemotingServer
from rmq.broker_server.security.acl import Acl
from rmq.broker_server.security.caller import Caller, current_caller, run_as
from rmq.remoting.remoting_command import RemotingCommand
from rmq.remoting.request_code import RequestCode, ResponseCode
from tests.broker_server.remoting_client import RemotingTestClient
from tests.waiting import wait_until

KiB = 1024
MiB = 1024 * KiB
BODY = b"r" * (64 * KiB)          # one request frame: ≈ 64 KiB
FRAMES = 512                      # ≈ 32 MiB in all
UNREAD_BOUND = 8 * MiB            # what the sockets' buffers and one read may hold beyond the bounds
FRAME_CODE = RequestCode.GET_ROUTEINFO_BY_TOPIC   # the requests `frames` makes
STUCK_S = 1.0                     # how long the client's socket stays unwritable before it counts as stopped


class Gate:
    """A processor that holds every request until the gate opens, then answers with `answer`."""

    def __init__(self, answer: bytes = b"") -> None:
        self.started = 0
        self.answer = answer
        self.open: asyncio.Event | None = None

    async def process(self, context: CallContext, request: RemotingCommand) -> RemotingCommand | None:
        self.started += 1
        assert self.open is not None
        await self.open.wait()
        return request.response(ResponseCode.SUCCESS, body=self.answer)

    def answer_now(self, context: CallContext, request: RemotingCommand) -> RemotingCommand | None:
        """The server's `immediate` for FRAME_CODE: each such request answered on the read (the
        gate is open)."""
        self.started += 1
        return request.response(ResponseCode.SUCCESS, body=self.answer)


@dataclass
class Served:
    server: RemotingServer
    gate: Gate | Failing
    loop: asyncio.AbstractEventLoop

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.port}"

    def open_gate(self) -> None:
        assert isinstance(self.gate, Gate) and self.gate.open is not None
        self.loop.call_soon_threadsafe(self.gate.open.set)

    def unsent(self) -> int:
        """Bytes the broker wrote to its clients and the kernel has not taken yet."""
        return sum(channel.transport.get_write_buffer_size() for channel in list(self.server.channels))


@contextlib.contextmanager
def serve(limits: RemotingLimits, gate: Gate | Failing, immediate: bool = False) -> Iterator[Served]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * KiB)   # accepted sockets inherit it
    listener.bind(("127.0.0.1", 0))
    answers = {FRAME_CODE: gate.answer_now} if immediate and isinstance(gate, Gate) else None
    server = RemotingServer("127.0.0.1:0", gate, limits, sock=listener, immediate=answers)

    async def start() -> None:
        if isinstance(gate, Gate):
            gate.open = asyncio.Event()
        await server.start()

    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield Served(server, gate, loop)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def send_until_stopped(client: RemotingTestClient, data: bytes) -> int:
    """Write `data` without blocking until the peer stops taking it (the socket stays unwritable
    for STUCK_S) or all of it is sent: the bytes sent."""
    client.socket.setblocking(False)
    sent = 0
    try:
        while sent < len(data):
            try:
                sent += client.socket.send(data[sent : sent + MiB])
            except BlockingIOError:
                if not select.select([], [client.socket], [], STUCK_S)[1]:
                    break
    finally:
        client.socket.setblocking(True)
        client.socket.settimeout(30)
    return sent


def frames(count: int) -> tuple[bytes, list[int]]:
    commands = [RemotingCommand(FRAME_CODE, opaque=n, body=BODY) for n in range(1, count + 1)]
    return b"".join(command.encode() for command in commands), [command.opaque for command in commands]


@pytest.mark.parametrize(
    ("limits", "served_at_once"),
    [
        (RemotingLimits(max_requests_per_connection=2), 2),
        (RemotingLimits(max_request_bytes_per_connection=200 * KiB), 3),
        (RemotingLimits(max_request_bytes=100 * KiB), 1),
    ],
    ids=["requests-per-connection", "request-bytes-per-connection", "request-bytes-in-all"],
)
def test_a_connection_past_its_bounds_is_not_read_until_its_requests_finish(
    limits: RemotingLimits, served_at_once: int
) -> None:
    with serve(limits, Gate()) as served:
        data, opaques = frames(FRAMES)
        with RemotingTestClient(served.address) as client:
            sent = send_until_stopped(client, data)
            wait_until(lambda: served.gate.started == served_at_once,
                       lambda: f"{served.gate.started} requests served, not {served_at_once}")
            assert sent < UNREAD_BOUND, f"the broker took {sent} bytes of requests it could not serve"
            assert served.gate.started == served_at_once
            served.open_gate()
            client.socket.sendall(data[sent:])   # read again as the requests finish
            answers = [client.read() for _ in opaques]
            assert sorted(answer.opaque for answer in answers) == opaques
            assert served.gate.started == FRAMES


@pytest.mark.parametrize("immediate", [False, True], ids=["in a task", "on the read"])
def test_answers_a_client_does_not_read_wait_instead_of_piling_up(immediate: bool) -> None:
    """Also for answers given on the read (a plain single send's): the request counts as running
    until the client reads its answer."""
    answer = b"a" * MiB
    requests = 4
    gate = Gate(answer)
    with serve(RemotingLimits(max_requests_per_connection=requests), gate, immediate) as served:
        served.open_gate()
        data, opaques = frames(64)
        with RemotingTestClient(served.address) as client:
            client.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * KiB)
            sent = send_until_stopped(client, data)
            wait_until(lambda: served.unsent() > 0, "answers the client does not read")
            wait_until(lambda: not any(channel.transport.is_reading() for channel in served.server.channels),
                       "the connection is not read while its answers wait")
            stuck = served.gate.started
            assert stuck < len(opaques), "every request was answered into the broker's buffers"
            assert served.unsent() <= (requests + 1) * len(answer)
            rest = threading.Thread(target=client.socket.sendall, args=(data[sent:],))
            rest.start()
            answers = [client.read() for _ in opaques]   # reading lets the rest through
            rest.join()
            assert sorted(a.opaque for a in answers) == opaques and answers[0].body == answer


class Failing:
    """Raises, at once or after a wait; otherwise answers with the caller it found set."""

    async def process(self, context: CallContext, request: RemotingCommand) -> RemotingCommand | None:
        if request.ext_fields.get("fail") == "after a wait":
            await asyncio.sleep(0)
        if "fail" in request.ext_fields:
            raise RuntimeError("broken processor")
        found = current_caller()
        run_as(Caller("someone", lambda: Acl({})))   # as the dispatcher does for an ACL's account
        return request.response(ResponseCode.SUCCESS, remark=repr(found))


@pytest.mark.parametrize("when", ["at once", "after a wait"])
def test_a_failing_request_is_answered_with_a_system_error(when: str) -> None:
    with serve(RemotingLimits(), Failing()) as served, RemotingTestClient(served.address) as client:
        failed = client.call(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"fail": when}))
        assert failed.code == ResponseCode.SYSTEM_ERROR and "broken processor" in (failed.remark or "")
        assert client.call(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC)).code == ResponseCode.SUCCESS


def test_each_request_runs_as_its_own_caller() -> None:
    """A request served inside the read sets its caller in a context of its own: the next request
    on the connection does not find it."""
    with serve(RemotingLimits(), Failing()) as served, RemotingTestClient(served.address) as client:
        answers = [client.call(RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC)) for _ in range(2)]
        assert [answer.remark for answer in answers] == ["None", "None"]


class Holding(Gate):
    """A Gate whose first request holds the event loop until `release` is set, recording the
    order in which requests were answered on the read (by the client's address)."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[str] = []
        self.holding, self.release = threading.Event(), threading.Event()

    def answer_now(self, context: CallContext, request: RemotingCommand) -> RemotingCommand | None:
        if not self.order:
            self.holding.set()
            self.release.wait(30)
        self.order.append(context.channel.host)
        return super().answer_now(context, request)


def test_a_connection_with_many_requests_read_does_not_keep_another_waiting() -> None:
    """Issue 41's flood: a client that wrote thousands of requests at once (and reads none of
    its answers) has them served a few per turn of the event loop, so another connection's
    request is answered after a handful of them, not after all that one read brought in."""
    gate = Holding()
    flood = [RemotingCommand(FRAME_CODE, opaque=n) for n in range(1, 2001)]
    with serve(RemotingLimits(max_requests_per_connection=4096), gate, immediate=True) as served:
        served.open_gate()
        with RemotingTestClient(served.address) as flooder:
            flooder.socket.sendall(b"".join(command.encode() for command in flood))
            assert gate.holding.wait(30), "the flood's first request was not served"
            # the loop is held inside the flood's first request, all 2,000 read into its buffer
            with RemotingTestClient(served.address, source="127.0.0.2") as other:
                opaque = other.send(RemotingCommand(FRAME_CODE))
                gate.release.set()
                answer = other.read()
            assert answer.opaque == opaque and answer.code == ResponseCode.SUCCESS
            served_before = gate.order.index("127.0.0.2")
            assert served_before < 50, f"{served_before} of the flood's requests were served first"
