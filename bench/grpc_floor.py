"""The floor under every rmq call: one unary call from a synchronous grpc stub to a bare
Python grpc.aio server in its own process (rmq.v1 RouteService.QueryRoute answering an empty
response, no rmq code on either side), on loopback. A long-poll wake crosses the same path once
each way (the send's request, the held pull's answer: one round trip of transit) after both
processes sat idle, so the floor is measured back to back and after the wake's idle time: how
low the wake rows can go here.

    python -m bench.grpc_floor PORT_FILE    # serve until killed, writing the bound port
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from grpc import aio

from bench.harness import call_latencies_ms
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

READY_TIMEOUT_S = 30.0


class _EmptyRoutes(rmq_pb2_grpc.RouteServiceServicer):
    async def QueryRoute(self, request: rmq_pb2.QueryRouteRequest,
                         context: aio.ServicerContext) -> rmq_pb2.QueryRouteResponse:
        return rmq_pb2.QueryRouteResponse()


async def _serve(port_file: Path) -> None:
    server = aio.server()
    rmq_pb2_grpc.add_RouteServiceServicer_to_server(_EmptyRoutes(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    port_file.write_text(str(port))
    await server.wait_for_termination()


@contextmanager
def bare_server(work_dir: Path) -> Iterator[str]:
    """A bare grpc.aio server process; yields its address."""
    port_file = work_dir / "grpc-floor.port"
    port_file.unlink(missing_ok=True)
    process = subprocess.Popen([sys.executable, "-m", "bench.grpc_floor", str(port_file)])
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not port_file.exists() or not port_file.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the bare gRPC server did not start (exit {process.poll()})")
            time.sleep(0.05)
        yield f"127.0.0.1:{port_file.read_text()}"
    finally:
        process.kill()
        process.wait()


def round_trips_ms(address: str, samples: int, idle_s: float = 0.0) -> list[float]:
    """`samples` unary calls (after 20 to warm up), each in ms, each after `idle_s`."""
    with grpc.insecure_channel(address) as channel:
        stub = rmq_pb2_grpc.RouteServiceStub(channel)
        request = rmq_pb2.QueryRouteRequest(topic="floor")
        return call_latencies_ms(lambda: stub.QueryRoute(request), samples, idle_s=idle_s)


if __name__ == "__main__":
    asyncio.run(_serve(Path(sys.argv[1])))
