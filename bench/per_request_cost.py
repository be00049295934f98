"""The broker's cost of one message per request (issue 41; bench/NOTES.md "One message per
request"): a broker process at its defaults (ASYNC flush, remoting port on) is sent `--count`
single-message requests, one at a time from one thread, over each protocol:

- remoting: rmq's `Producer.send(Message)`, which takes the broker's remoting port for one
  message (docs/client-behaviour.md "Transport");
- rmq.v1 gRPC: the same with the broker's remoting port off;
- RocketMQ 5 gRPC: the official `rocketmq-python-client` Producer's `send` (skipped when it is
  not installed);
- cpp: the official 4.x C++ client's `send_sync` from one thread (PyPI rocketmq 0.4.4, installed
  by testing.cpp_client; bench/cpp_send_sync.py), with the rate it reached;
- pull, offset, heartbeat: remoting PULL_MESSAGE of one stored message, UPDATE_CONSUMER_OFFSET
  and a consumer's HEART_BEAT, from one connection (RocketMQ's binary header);
- the floors, servers with no rmq code answering each request at once: grpc-echo (a bare grpc.aio
  unary echo on the broker's event loop), grpc-echo-asyncio (the same on asyncio's loop),
  grpc-sync-echo (grpc's synchronous server, a thread pool), protocol-echo and
  protocol-echo-asyncio (a bare asyncio.Protocol answering each length-prefixed frame): what the
  server framework itself costs per request.

`--kind` picks some (repeatable). For each it prints the broker's CPU per request (its
/proc/<pid>/stat utime and stime over the run, divided by the count) and, with `--profile`, the
Python function calls per request on the broker's event-loop thread (cProfile enabled after
start-up and warm-up by SIGUSR1, dumped by SIGUSR2), with the functions that cost the most.
`python -m bench.per_request_cost --count 5000 [--kind remoting ...] [--profile]`."""

from __future__ import annotations

import argparse
import functools
import json
import os
import pstats
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import grpc

from rmq.connector import Message, Producer
from rmq.connector.client import RmqClient
from rmq.connector.remoting_client import PullSpec, RemotingConnection
from rmq.message_queue import MessageQueue
from rmq.remoting.remoting_command import LanguageCode, RemotingCommand, SerializeType
from rmq.remoting.request_code import RequestCode, ResponseCode
from testing import processes
from testing.cpp_client import client_env, cpp_client_problem

TOPIC = "per-request"
GROUP = "per-request-cost"
PULL_TOPIC = "per-request-pull"
STORED = 200   # messages in queue 0 for the pulls, pulled one by one round and round
CPP_SCRIPT = Path(__file__).with_name("cpp_send_sync.py")
BODY = b"x" * 100
WARMUP = 200
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# SIGUSR1 / SIGUSR2 start and dump a profile of the main (event loop) thread into the file named
# by the first argument, which is taken off sys.argv.
PROFILER = r"""
import cProfile, signal, sys
profile_path = sys.argv.pop(1)
profiler = cProfile.Profile()
signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
def dump(*_):
    profiler.disable()
    profiler.dump_stats(profile_path)
signal.signal(signal.SIGUSR2, dump)
"""
# Runs `rmq broker ...` under PROFILER.
PROFILED_BROKER = PROFILER + r"""
from rmq.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


# The floors: servers with no rmq code that answer each request at once, run like the broker
# (PROFILER first; arguments: the profile file, the port), to tell what the server framework itself
# costs per request. Each prints "ready" once it listens.
# A bare grpc.aio server on the broker's event loop (rmq.event_loop: uvloop unless RMQ_UVLOOP=0) with
# one generic unary method answering its request bytes as they are (no protobuf, no interceptor).
GRPC_AIO_ECHO = PROFILER + r"""
import grpc
from rmq import event_loop
port = sys.argv[1]
async def echo(request, context):
    return request
async def serve():
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
        "echo.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(echo)})])
    server.add_insecure_port("127.0.0.1:" + port)
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()
event_loop.run(serve())
"""
# The same on grpc's synchronous server (a thread pool of 8 runs the method; no event loop). The
# profiler sees only the thread that enabled it, so this floor's call counts are not comparable.
GRPC_SYNC_ECHO = PROFILER + r"""
from concurrent import futures
import grpc
port = sys.argv[1]
server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
    "echo.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(lambda request, context: request)})])
server.add_insecure_port("127.0.0.1:" + port)
server.start()
print("ready", flush=True)
server.wait_for_termination()
"""
# A bare asyncio.Protocol on rmq.event_loop answering each length-prefixed frame with the same
# bytes (what the remoting port's loop, transport and system calls cost with no request handled).
# FRAMED: an asyncio.Protocol calling `frame(bytes)` for each length-prefixed frame it reads whole.
FRAMED = r"""
import asyncio
class Framed(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""
    def data_received(self, data):
        buffer = self.buffer + data
        while len(buffer) >= 4:
            end = 4 + int.from_bytes(buffer[:4], "big")
            if len(buffer) < end:
                break
            self.frame(buffer[:end])
            buffer = buffer[end:]
        self.buffer = buffer
"""
PROTOCOL_ECHO = PROFILER + FRAMED + r"""
from rmq import event_loop
port = int(sys.argv[1])
class Echo(Framed):
    def frame(self, frame):
        self.transport.write(frame)
async def serve():
    server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()
event_loop.run(serve())
"""
ECHO_FRAME = len(BODY).to_bytes(4, "big") + BODY


class FrameEcho:
    """A client of PROTOCOL_ECHO: one frame of BODY sent and its echo read back, per request."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def request(self) -> None:
        self.sock.sendall(ECHO_FRAME)
        wanted = len(ECHO_FRAME)
        while wanted:
            wanted -= len(self.sock.recv(wanted))


def grpc_echo_driver(port: int) -> Driver:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    return EachRequest(functools.partial(channel.unary_unary("/echo.Echo/Echo"), BODY), channel.close)


def frame_echo_driver(port: int) -> Driver:
    client = FrameEcho(port)
    return EachRequest(client.request, client.sock.close)


@dataclass(frozen=True)
class Floor:
    """A server with no rmq code (its script), the client driving it, the environment it runs in."""

    name: str
    script: str
    driver: Callable[[int], Driver]
    env: tuple[tuple[str, str], ...] = ()


FLOORS = {
    "grpc-echo": Floor("bare grpc.aio unary echo, uvloop (the gRPC ports' floor)", GRPC_AIO_ECHO,
                       grpc_echo_driver),
    "grpc-echo-asyncio": Floor("bare grpc.aio unary echo, asyncio's loop", GRPC_AIO_ECHO,
                               grpc_echo_driver, (("RMQ_UVLOOP", "0"),)),
    "grpc-sync-echo": Floor("bare grpc.server unary echo (sync, thread pool of 8)", GRPC_SYNC_ECHO,
                            grpc_echo_driver),
    "protocol-echo": Floor("bare asyncio.Protocol frame echo, uvloop (the remoting port's floor)",
                           PROTOCOL_ECHO, frame_echo_driver),
    "protocol-echo-asyncio": Floor("bare asyncio.Protocol frame echo, asyncio's loop", PROTOCOL_ECHO,
                                   frame_echo_driver, (("RMQ_UVLOOP", "0"),)),
}


def broker_cpu(pid: int) -> tuple[float, float]:
    """utime and stime of the whole broker process, in seconds."""
    return stat_cpu(Path(f"/proc/{pid}/stat"))


def stat_cpu(stat: Path) -> tuple[float, float]:
    """utime and stime, in seconds, from a /proc stat file (a process's or a thread's)."""
    fields = stat.read_text().rpartition(")")[2].split()
    return int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS


@contextmanager
def broker(directory: Path, remoting: bool, profile: Path | None) -> Iterator[processes.ServerProcess]:
    extra = [] if remoting else ["--remoting-listen", "off"]
    server = processes.broker(directory, flush="async", extra=extra)
    if profile is not None:
        server.command = [sys.executable, "-c", PROFILED_BROKER, str(profile)]
    server.start()
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=8)
        yield server
    finally:
        server.stop()


class Driver(Protocol):
    """One kind of request, sent one at a time: `warm_up` (route, connection, caches), `run`
    `count` requests, `close`."""

    def warm_up(self) -> None: ...

    def run(self, count: int) -> None: ...

    def close(self) -> None: ...


@dataclass
class EachRequest:
    """A Driver making one request per call of `request`."""

    request: Callable[[], object]
    close: Callable[[], None]

    def warm_up(self) -> None:
        self.run(WARMUP)

    def run(self, count: int) -> None:
        request = self.request
        for _ in range(count):
            request()


def rmq_sender(address: str) -> Driver:
    producer = Producer(address)
    producer.start()
    return EachRequest(lambda: producer.send(Message(TOPIC, BODY)), producer.shutdown)


def rocketmq_v2_sender(address: str) -> Driver:
    import rocketmq  # rocketmq-python-client

    config = rocketmq.ClientConfiguration(address, rocketmq.Credentials())
    producer = rocketmq.Producer(config, (TOPIC,))
    producer.startup()

    def send() -> Any:
        message = rocketmq.Message()
        message.topic, message.body = TOPIC, BODY
        return producer.send(message)
    return EachRequest(send, producer.shutdown)


class CppSender:
    """The official 4.x C++ client's `send_sync` from one thread (bench/cpp_send_sync.py in its
    own process, the client first on its path): it warms up itself; `run` sends and reads the
    rate it reached."""

    def __init__(self, address: str) -> None:
        problem = cpp_client_problem()
        if problem is not None:
            raise ImportError(problem)
        self.address, self.rate, self.client_cpu_us = remoting_address(address), 0.0, 0.0
        self.process: subprocess.Popen[str] | None = None

    def warm_up(self) -> None:
        pass   # the script warms up before it says "ready", in `run`'s process

    def run(self, count: int) -> None:
        scenario = {"address": self.address, "topic": TOPIC, "count": count, "body": BODY.hex()}
        self.process = subprocess.Popen(
            [sys.executable, str(CPP_SCRIPT), json.dumps(scenario)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, env=client_env())
        assert self.process.stdin is not None and self.process.stdout is not None
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the C++ client did not start")
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        result = json.loads(self.process.stdout.readline())
        self.rate, self.client_cpu_us = result["rate"], result["client_cpu_us"]

    def close(self) -> None:
        if self.process is not None:
            self.process.wait(60)


def remoting_address(address: str) -> str:
    with RmqClient(address) as client:
        return client.list_broker_groups()["broker-a"][0].remoting_address


class RemotingRequests:
    """One remoting request kind from one connection (RocketMQ's binary header, as the SDK and
    the C++ client write it): PULL_MESSAGE of one stored message (never held), UPDATE_CONSUMER_OFFSET
    or a consumer's HEART_BEAT."""

    def __init__(self, address: str, code: RequestCode) -> None:
        self.connection = RemotingConnection(remoting_address(address), None, 10.0)
        self.code, self.sent = code, 0
        if code is RequestCode.PULL_MESSAGE:   # messages to pull, in a topic of one queue
            with RmqClient(address) as client:
                client.create_topic(PULL_TOPIC, queues=1)
            producer = Producer(address)
            producer.start()
            producer.send([Message(PULL_TOPIC, BODY) for _ in range(STORED)])
            producer.shutdown()

    def command(self) -> RemotingCommand:
        self.sent += 1
        if self.code is RequestCode.PULL_MESSAGE:
            queue = MessageQueue(PULL_TOPIC, "broker-a", 0)
            fields = PullSpec.of(queue, self.sent % STORED, 1, GROUP, "*", 0, None).header()
        elif self.code is RequestCode.UPDATE_CONSUMER_OFFSET:
            fields = {"consumerGroup": GROUP, "topic": TOPIC, "queueId": "0", "commitOffset": str(self.sent)}
        else:
            fields = {}
        body = HEARTBEAT if self.code is RequestCode.HEART_BEAT else b""
        return RemotingCommand(self.code, ext_fields=fields, body=body, language=LanguageCode.PYTHON,
                               serialize_type=SerializeType.ROCKETMQ)

    def warm_up(self) -> None:
        self.run(WARMUP)

    def run(self, count: int) -> None:
        for _ in range(count):
            answer = self.connection.call(self.command(), 10.0)
            if answer.code != ResponseCode.SUCCESS:
                raise RuntimeError(f"request code {self.code} answered {answer.code}: {answer.remark}")

    def close(self) -> None:
        self.connection.close()


HEARTBEAT = json.dumps({"clientID": "per-request-cost", "consumerDataSet": [{
    "groupName": "per-request-cost", "messageModel": "CLUSTERING", "consumeType": "CONSUME_PASSIVELY",
    "subscriptionDataSet": [{"topic": TOPIC, "subString": "*"}]}]}).encode()


def requests_of(code: RequestCode) -> Callable[[str], Driver]:
    return functools.partial(RemotingRequests, code=code)


SENDERS: dict[str, tuple[bool, Callable[[str], Driver]]] = {
    "remoting (rmq Producer.send)": (True, rmq_sender),
    "rmq.v1 gRPC (rmq Producer.send, remoting off)": (False, rmq_sender),
    "RocketMQ 5 gRPC (official Producer.send)": (True, rocketmq_v2_sender),
    "remoting, official 4.x C++ client send_sync": (True, CppSender),
    "remoting PULL_MESSAGE (one message)": (True, requests_of(RequestCode.PULL_MESSAGE)),
    "remoting UPDATE_CONSUMER_OFFSET": (True, requests_of(RequestCode.UPDATE_CONSUMER_OFFSET)),
    "remoting HEART_BEAT (a consumer)": (True, requests_of(RequestCode.HEART_BEAT)),
}
KINDS = dict(zip(("remoting", "v1", "v2", "cpp", "pull", "offset", "heartbeat"), SENDERS, strict=True))


def measure(name: str, count: int, profile: bool, top: int, sort: str = "tottime") -> str:
    remoting, make_sender = SENDERS[name]
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        profile_path = directory / "broker.prof" if profile else None
        with broker(directory, remoting, profile_path) as server:
            assert server.process is not None
            pid = server.process.pid
            driver = make_sender(server.address)
            try:
                driver.warm_up()
                spent = timed(pid, functools.partial(driver.run, count), profile_path)
            finally:
                driver.close()
            if profile_path is None:
                rate = (f", {driver.rate:.0f} msg/s, client CPU {driver.client_cpu_us:.0f} us per send"
                        if isinstance(driver, CppSender) else "")
                return cpu_line(name, count, spent) + rate
            return profile_report(name, profile_path, count, top, sort)


@dataclass
class Spent:
    """What a server process spent while `run` ran (`timed`): user and system CPU seconds, the
    part on its main (event-loop) thread, the CPU seconds of each other thread that spent any
    (by thread id), and the main thread's context switches (voluntary: it waited; involuntary:
    it was preempted)."""

    user: float
    system: float
    loop: float
    other_threads: dict[str, float]
    voluntary: int
    involuntary: int


def thread_cpu(pid: int) -> dict[str, float]:
    """utime + stime, in seconds, of each thread of process `pid` (by thread id)."""
    spent = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            spent[task.name] = sum(stat_cpu(task / "stat"))
        except OSError:   # the thread ended meanwhile
            continue
    return spent


def context_switches(pid: int) -> tuple[int, int]:
    """(voluntary, involuntary) context switches of process `pid`'s main thread so far."""
    fields = dict(line.split(":", 1) for line in
                  Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["voluntary_ctxt_switches"]), int(fields["nonvoluntary_ctxt_switches"])


def timed(pid: int, run: Callable[[], None], profile_path: Path | None) -> Spent:
    """What process `pid` spends while `run` runs (Spent); with `profile_path`, profiled
    (SIGUSR1 before, SIGUSR2 after: the profile is dumped there)."""
    if profile_path is not None:
        os.kill(pid, signal.SIGUSR1)
        time.sleep(0.2)
    before, threads_before, switches_before = broker_cpu(pid), thread_cpu(pid), context_switches(pid)
    run()
    user, system = (after - first for after, first in zip(broker_cpu(pid), before, strict=True))
    threads = {tid: spent - threads_before.get(tid, 0.0) for tid, spent in thread_cpu(pid).items()}
    voluntary, involuntary = (after - first for after, first in
                              zip(context_switches(pid), switches_before, strict=True))
    if profile_path is not None:
        os.kill(pid, signal.SIGUSR2)
        while not profile_path.exists() or profile_path.stat().st_size == 0:
            time.sleep(0.05)
        time.sleep(0.2)
    loop = threads.pop(str(pid), 0.0)
    return Spent(user, system, loop, {tid: spent for tid, spent in threads.items() if spent > 0},
                 voluntary, involuntary)


def cpu_line(name: str, count: int, spent: Spent) -> str:
    each = [seconds / count * 1e6
            for seconds in (spent.user + spent.system, spent.user, spent.system, spent.loop)]
    others = ", ".join(f"thread {tid} {seconds / count * 1e6:.1f}"
                       for tid, seconds in sorted(spent.other_threads.items(), key=lambda item: -item[1]))
    return (f"{name}: server CPU {each[0]:.0f} us per request ({each[1]:.0f} user + {each[2]:.0f} system; "
            f"{each[3]:.0f} on its main (event-loop) thread; other threads: {others or 'none'}; "
            f"main thread context switches per request: {spent.voluntary / count:.2f} voluntary, "
            f"{spent.involuntary / count:.2f} involuntary; {count} requests)")


def profile_report(name: str, path: Path, count: int, top: int, sort: str) -> str:
    saved = os.environ.get("RMQ_SAVE_PROFILE")   # a file to keep the raw profile in (pstats)
    if saved:
        shutil.copyfile(path, saved)
    stats = pstats.Stats(str(path))
    calls = stats.total_calls / count  # type: ignore[attr-defined]
    lines = [f"{name}: {calls:.0f} Python function calls per request on the server's loop thread "
             f"({count} requests)"]
    with tempfile.TemporaryFile("w+") as out:
        stats.stream = out  # type: ignore[attr-defined]
        stats.sort_stats(sort).print_stats(top)
        out.seek(0)
        lines.append(out.read())
    return "\n".join(lines)


def measure_floor(floor: Floor, count: int, profile: bool, top: int, sort: str) -> str:
    """A floor's server (FLOORS) called `count` times from one thread, 100 bytes each way: its
    CPU (or Python calls) per request."""
    with tempfile.TemporaryDirectory() as scratch:
        profile_path = Path(scratch) / "echo.prof"
        port = processes.free_port()
        server = subprocess.Popen([sys.executable, "-c", floor.script, str(profile_path), str(port)],
                                  stdout=subprocess.PIPE, text=True, env={**os.environ, **dict(floor.env)})
        try:
            assert server.stdout is not None
            if server.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the {floor.name} server did not start")
            driver = floor.driver(port)
            try:
                driver.warm_up()
                spent = timed(server.pid, functools.partial(driver.run, count),
                              profile_path if profile else None)
            finally:
                driver.close()
        finally:
            server.terminate()
            server.wait(20)
        if not profile:
            return cpu_line(floor.name, count, spent)
        return profile_report(floor.name, profile_path, count, top, sort)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--profile", action="store_true", help="count Python calls instead of CPU")
    parser.add_argument("--top", type=int, default=25, help="functions listed per profile")
    parser.add_argument("--sort", default="tottime", help="the profile's order (a pstats sort key)")
    parser.add_argument("--kind", "--only", choices=(*KINDS, *FLOORS), action="append",
                        help="the request kinds measured (repeatable; default: every kind)")
    args = parser.parse_args()
    for kind in args.kind or [*KINDS, *FLOORS]:
        if kind in FLOORS:
            print(measure_floor(FLOORS[kind], args.count, args.profile, args.top, args.sort), flush=True)
            continue
        name = KINDS[kind]
        try:
            print(measure(name, args.count, args.profile, args.top, args.sort), flush=True)
        except ImportError as error:
            print(f"{name}: not measured ({error})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
