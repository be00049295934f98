"""The floor of a unary gRPC call in Python on this machine (issue 41, bench/NOTES.md "The gRPC
floor"): the server process's CPU per unary request when the server runs no rmq code at all, for
each server grpcio offers, the event loops it runs on, the server options that could matter and
the clients that drive the broker's gRPC ports.

Servers (`--server`, repeatable):
- aio-uvloop / aio-asyncio: `grpc.aio.server()` on uvloop's / asyncio's event loop;
- sync-8 / sync-1: grpc's synchronous `grpc.server` with a ThreadPoolExecutor of 8 / 1 workers.
Each has one generic unary method `/echo.Echo/Echo` answering its request bytes as they are, and
the RocketMQ 5 MessagingService's QueryRoute, Heartbeat, Telemetry, SendMessage and
NotifyClientTermination answering canned messages (built once at start, no parsing per call,
bytes in and bytes out), so that the official RocketMQ 5 client can drive it as it drives the
broker. No module of rmq is imported by the server.

Variants (`--variant`, repeatable): `default`; server options `reuseport-off`
(grpc.so_reuseport=0), `streams-1` (grpc.max_concurrent_streams=1), `latency`
(grpc.optimization_target=latency), `bdp-off` (grpc.http2.bdp_probe=0), `no-compression`
(compression=NoCompression explicitly); environment `poll` (GRPC_POLL_STRATEGY=poll), `epoll1`
(GRPC_POLL_STRATEGY=epoll1), `ee-off` (GRPC_EXPERIMENTS turning grpc core's EventEngine
experiments off), `callback-cq-off` (GRPC_EXPERIMENTS=-event_engine_callback_cq), `rmq-options`
(the broker's own server options at its defaults: rmq_v1/grpc_server.server_options).

Clients (`--client`, repeatable): `minimal` (grpc's synchronous channel, `unary_unary` of 100
raw bytes: how rmq's SDK calls rmq.v1, connector/client_core.py), `minimal-md` (the same with
the official RocketMQ 5 client's eight headers and 3 s deadline on every call), `minimal-aio` (a grpc.aio
channel awaited from one asyncio loop: how the official RocketMQ 5 client calls), `rocketmq` (the
official rocketmq-python-client's `Producer.send` of a 100-byte message, against the canned
MessagingService).

For each combination it prints the server's CPU per request (/proc/<pid>/stat utime + stime over
`--count` requests after 300 of warm-up, divided by the count), its threads' context switches per
request (/proc/<pid>/task/*/status) and the threads that spent the CPU (/proc/<pid>/task/*/stat,
named by their comm), `--repeat` times.
`python -m bench.grpc_cpu_floor --count 3000 [--server S ...] [--variant V ...] [--client C ...]`."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from bench.per_request_cost import broker_cpu, stat_cpu
from rmq.broker_server.config import BrokerConfig
from rmq.broker_server.rmq_v1.grpc_server import server_options
from rmq.broker_server.security.server_security import DEFAULT_IDLE_TIMEOUT_S
from testing import processes

BODY = b"x" * 100
WARMUP = 300
TOPIC = "floor-topic"

# The server: argv[1] is a JSON config {"server", "port", "options", "compression"}. It prints
# "ready" once it listens, and serves until terminated.
SERVER = r"""
import json, sys
import grpc
from rocketmq.grpc_protocol import definition_pb2 as d, service_pb2 as s

config = json.loads(sys.argv[1])
port, options = config["port"], [tuple(option) for option in config["options"]]
compression = grpc.Compression.NoCompression if config["compression"] else None
ok = d.Status(code=d.OK, message="OK")
topic = d.Resource(name="floor-topic")
endpoints = d.Endpoints(scheme=d.IPv4, addresses=[d.Address(host="127.0.0.1", port=port)])
broker = d.Broker(name="floor", id=0, endpoints=endpoints)
route = s.QueryRouteResponse(status=ok, message_queues=[
    d.MessageQueue(topic=topic, id=queue, permission=d.READ_WRITE, broker=broker,
                   accept_message_types=[d.NORMAL]) for queue in range(8)]).SerializeToString()
heartbeat = s.HeartbeatResponse(status=ok).SerializeToString()
sent = s.SendMessageResponse(status=ok, entries=[s.SendResultEntry(
    status=ok, message_id="01000000000000000000000000", offset=1)]).SerializeToString()
terminated = s.NotifyClientTerminationResponse(status=ok).SerializeToString()

def settings_reply(raw):
    command = s.TelemetryCommand.FromString(raw)
    reply = s.TelemetryCommand(status=ok)
    reply.settings.CopyFrom(command.settings)
    reply.settings.metric.Clear()
    reply.settings.publishing.max_body_size = 4 * 1024 * 1024
    reply.settings.backoff_policy.max_attempts = 3
    reply.settings.backoff_policy.exponential_backoff.initial.nanos = 10_000_000
    reply.settings.backoff_policy.exponential_backoff.max.seconds = 1
    reply.settings.backoff_policy.exponential_backoff.multiplier = 2.0
    return reply.SerializeToString()

def canned(answer):
    return lambda request, context: answer

def handlers(unary, telemetry):
    return [
        grpc.method_handlers_generic_handler("echo.Echo", {"Echo": unary(lambda request, context: request)}),
        grpc.method_handlers_generic_handler("apache.rocketmq.v2.MessagingService", {
            "QueryRoute": unary(canned(route)), "Heartbeat": unary(canned(heartbeat)),
            "SendMessage": unary(canned(sent)), "NotifyClientTermination": unary(canned(terminated)),
            "Telemetry": grpc.stream_stream_rpc_method_handler(telemetry)}),
    ]

if config["server"].startswith("aio"):
    import asyncio
    async def telemetry(requests, context):
        async for raw in requests:
            yield settings_reply(raw)
    async def serve():
        server = grpc.aio.server(options=options, compression=compression)
        server.add_generic_rpc_handlers(handlers(grpc.unary_unary_rpc_method_handler, telemetry))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        print("ready", flush=True)
        await server.wait_for_termination()
    if config["server"] == "aio-uvloop":
        import uvloop
        uvloop.run(serve())
    else:
        asyncio.run(serve())
else:
    from concurrent import futures
    def telemetry(requests, context):
        for raw in requests:
            yield settings_reply(raw)
    workers = int(config["server"].rpartition("-")[2])
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers), options=options,
                         compression=compression)
    server.add_generic_rpc_handlers(handlers(grpc.unary_unary_rpc_method_handler, telemetry))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()
"""


# grpc core's EventEngine experiments (grpcio 1.85 names), each turned off
EVENT_ENGINE_OFF = ",".join(f"-event_engine_{name}" for name in (
    "client", "listener", "for_all_other_endpoints", "callback_cq"))


@dataclass(frozen=True)
class Variant:
    """Server options and environment tried against the default."""

    options: tuple[tuple[str, object], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    no_compression: bool = False


VARIANTS = {
    "default": Variant(),
    "reuseport-off": Variant(options=(("grpc.so_reuseport", 0),)),
    "streams-1": Variant(options=(("grpc.max_concurrent_streams", 1),)),
    "latency": Variant(options=(("grpc.optimization_target", "latency"),)),
    "bdp-off": Variant(options=(("grpc.http2.bdp_probe", 0),)),
    "no-compression": Variant(no_compression=True),
    "poll": Variant(env=(("GRPC_POLL_STRATEGY", "poll"),)),
    "epoll1": Variant(env=(("GRPC_POLL_STRATEGY", "epoll1"),)),
    "ee-off": Variant(env=(("GRPC_EXPERIMENTS", EVENT_ENGINE_OFF),)),
    "callback-cq-off": Variant(env=(("GRPC_EXPERIMENTS", "-event_engine_callback_cq"),)),
    # the broker's own server options at its defaults (rmq_v1/grpc_server.server_options)
    "rmq-options": Variant(options=tuple(server_options(BrokerConfig.grpc_max_message_bytes, 1024,
                                                        DEFAULT_IDLE_TIMEOUT_S))),
}
SERVERS = ("aio-uvloop", "aio-asyncio", "sync-8", "sync-1")


class Client:
    """`request` once per call; `close` at the end."""

    request: Callable[[], object]

    def close(self) -> None: ...


class MinimalClient(Client):
    def __init__(self, port: int) -> None:
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        call: Any = self.channel.unary_unary("/echo.Echo/Echo")
        self.request = lambda: call(BODY)

    def close(self) -> None:
        self.channel.close()


# what the official RocketMQ 5 client sends with every call (rocketmq.v5.util.signature): eight
# headers, and a 3 s deadline
ROCKETMQ_METADATA = (
    ("x-mq-language", "PYTHON"), ("x-mq-protocol", "GRPC_V2"), ("x-mq-client-version", "5.1.2"),
    ("x-mq-date-time", "20261129T030000Z"), ("x-mq-request-id", "0b9a4b8e-6c1e-4c55-9d0c-2a6f5c7e9d11"),
    ("x-mq-client-id", "host@1234@0@abcdef"), ("x-mq-namespace", ""),
    ("authorization", "MQv2-HMAC-SHA1 Credential=, SignedHeaders=x-mq-date-time, "
                      "Signature=0123456789abcdef0123456789abcdef01234567"))


class MetadataClient(MinimalClient):
    """The minimal client sending the official RocketMQ 5 client's headers and deadline."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        call: Any = self.channel.unary_unary("/echo.Echo/Echo")
        self.request = lambda: call(BODY, timeout=3.0, metadata=ROCKETMQ_METADATA)


class MinimalAioClient(Client):
    def __init__(self, port: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.channel = self.loop.run_until_complete(self._open(port))
        call: Any = self.channel.unary_unary("/echo.Echo/Echo")
        self.request = lambda: self.loop.run_until_complete(call(BODY))

    @staticmethod
    async def _open(port: int) -> grpc.aio.Channel:
        return grpc.aio.insecure_channel(f"127.0.0.1:{port}")

    def close(self) -> None:
        self.loop.run_until_complete(self.channel.close())
        self.loop.close()


class RocketMQClient(Client):
    """The official RocketMQ 5 client's Producer.send, one message at a time (its own threads and
    event loop, as in bench.per_request_cost's `v2` kind)."""

    def __init__(self, port: int) -> None:
        import rocketmq  # rocketmq-python-client

        config = rocketmq.ClientConfiguration(f"127.0.0.1:{port}", rocketmq.Credentials())
        self.producer = rocketmq.Producer(config, (TOPIC,))
        self.producer.startup()

        def send() -> object:
            message = rocketmq.Message()
            message.topic, message.body = TOPIC, BODY
            return self.producer.send(message)
        self.request = send

    def close(self) -> None:
        self.producer.shutdown()


CLIENTS: dict[str, Callable[[int], Client]] = {
    "minimal": MinimalClient, "minimal-md": MetadataClient, "minimal-aio": MinimalAioClient,
    "rocketmq": RocketMQClient}


def thread_cpu(pid: int) -> dict[str, float]:
    """utime + stime in seconds of each thread of `pid`, by "comm/tid"."""
    spent = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu = sum(stat_cpu(task / "stat"))
            name = (task / "comm").read_text().strip()
        except FileNotFoundError:
            continue
        thread = "main" if task.name == str(pid) else name
        spent[f"{thread}/{task.name}"] = cpu
    return spent


def context_switches(pid: int) -> int:
    """Voluntary and involuntary context switches of every thread of `pid` so far."""
    switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except FileNotFoundError:
            continue
        switches += sum(int(line.split()[1]) for line in status.splitlines() if "ctxt_switches" in line)
    return switches


def measure(server: str, variant_name: str, client: str, count: int) -> str:
    variant = VARIANTS[variant_name]
    port = processes.free_port()
    config = {"server": server, "port": port, "options": variant.options,
              "compression": variant.no_compression}
    process = subprocess.Popen([sys.executable, "-c", SERVER, json.dumps(config)], stdout=subprocess.PIPE,
                               text=True, env={**os.environ, **dict(variant.env)})
    try:
        assert process.stdout is not None
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the {server} server did not start")
        driver = CLIENTS[client](port)
        try:
            for _ in range(WARMUP):
                driver.request()
            time.sleep(0.2)
            before, threads_before = broker_cpu(process.pid), thread_cpu(process.pid)
            switches_before = context_switches(process.pid)
            request = driver.request
            for _ in range(count):
                request()
            after, threads_after = broker_cpu(process.pid), thread_cpu(process.pid)
            switches = (context_switches(process.pid) - switches_before) / count
        finally:
            driver.close()
    finally:
        process.terminate()
        process.wait(20)
    user, system = ((late - early) / count * 1e6 for late, early in zip(after, before, strict=True))
    threads = sorted(((spent - threads_before.get(name, 0.0)) / count * 1e6, name)
                     for name, spent in threads_after.items())
    busy = ", ".join(f"{name.partition('/')[0]} {us:.0f}" for us, name in reversed(threads) if us >= 5)
    return (f"{server:11} {variant_name:14} {client:11} {user + system:5.0f} us "
            f"({user:.0f} user + {system:.0f} system), {switches:.1f} context switches; threads: {busy}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--server", choices=SERVERS, action="append")
    parser.add_argument("--variant", choices=VARIANTS, action="append")
    parser.add_argument("--client", choices=CLIENTS, action="append")
    args = parser.parse_args()
    print(f"grpcio {grpc.__version__}, Python {sys.version.split()[0]}, load {os.getloadavg()[0]:.1f}")
    for _ in range(args.repeat):
        for server in args.server or SERVERS:
            for variant in args.variant or ["default"]:
                for client in args.client or ["minimal"]:
                    if server == "sync-1" and client == "rocketmq":
                        continue   # its Telemetry stream holds the one worker: sends wait forever
                    print(measure(server, variant, client, args.count), flush=True)
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
