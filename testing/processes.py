"""Local `rmq namesrv` / `rmq broker` processes (tests, bench, `make demo`): free loopback
ports, readiness by a real gRPC call (also for servers started with --acl or --tls-*), stop
(SIGTERM), kill -9 and restart on the same store."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from rmq.v1 import rmq_pb2, rmq_pb2_grpc

RMQ = [sys.executable, "-m", "rmq.cli"]


def ephemeral_port_range() -> tuple[int, int]:
    """The ports the kernel hands out for bind(0) and outgoing connections."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


_HANDED_OUT: set[int] = set()
_PICK = random.Random()


def free_port() -> int:
    """A loopback port nothing listens on, chosen below the kernel's ephemeral range and never
    twice in this process: a broker binds its Flight and remoting listeners to ephemeral ports
    (bind(0)) by default, and a port this harness picked and released inside that range could be
    handed to one of them before the server meant to use it starts (it then exits: address in use).
    Under pytest-xdist each worker picks from its own slice (`_port_slice`)."""
    ports = _port_slice()
    while True:
        port = _PICK.choice(ports)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port


def _port_slice() -> range:
    """The ports free_port picks from: 10000 up to the kernel's ephemeral range, or under pytest-xdist
    (`make test`'s workers) worker gwN's own N-th share of it, so two workers never hand out the same port."""
    low, _high = ephemeral_port_range()
    ports = range(10_000, max(low, 10_001))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or workers < 2:
        return ports
    share = len(ports) // workers
    return ports[int(worker[2:]) * share:][:share]


# A server with --acl refuses the unsigned readiness call with these codes: it answered, so it is up.
ANSWERED_REFUSALS = (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)


def wait_ready(address: str, process: subprocess.Popen[bytes], timeout: float = 30.0,
               channel_credentials: grpc.ChannelCredentials | None = None) -> None:
    """Wait until the server at `address` answers RouteService.ListBrokers (an ACL refusal
    counts as an answer). A TLS server (--tls-cert) is reached with `channel_credentials`."""
    deadline = time.monotonic() + timeout
    if channel_credentials is None:
        channel = grpc.insecure_channel(address)
    else:
        channel = grpc.secure_channel(address, channel_credentials)
    with channel:
        stub = rmq_pb2_grpc.RouteServiceStub(channel)
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"server at {address} exited with code {process.returncode}")
            try:
                stub.ListBrokers(rmq_pb2.ListBrokersRequest(), timeout=1.0)
                return
            except grpc.RpcError as error:
                if error.code() in ANSWERED_REFUSALS:
                    return
                time.sleep(0.05)
    raise TimeoutError(f"server at {address} not ready after {timeout}s")


@dataclass
class ServerProcess:
    """One `rmq` server process; `args` are the CLI words after `rmq`. A server started
    with --tls-cert needs `channel_credentials` that trust it (for the readiness call).
    `new_session`: the child gets its own session, so a Ctrl-C in the terminal reaches only
    the parent, which then stops the server itself."""

    args: list[str]
    address: str
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    channel_credentials: grpc.ChannelCredentials | None = None
    new_session: bool = False
    ready_timeout: float = 30.0     # seconds for the server to answer after its start
    command: list[str] = field(default_factory=lambda: list(RMQ))   # what runs `args`

    def start(self) -> ServerProcess:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            self.command + self.args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env},
            start_new_session=self.new_session,
        )
        log.close()
        try:
            wait_ready(self.address, self.process, self.ready_timeout,
                       channel_credentials=self.channel_credentials)
        except (RuntimeError, TimeoutError) as error:   # it exited, or never answered: say why
            self.kill()   # one that never answered is not left running (on its port, loading the machine)
            tail = "\n".join(self.log().splitlines()[-5:])
            raise type(error)(f"{error}; its log {self.log_path} ends:\n{tail}") from None
        return self

    def stop(self, timeout: float = 20.0) -> int:
        """Graceful stop (SIGTERM); returns the exit code."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def kill(self) -> None:
        """kill -9: no flush, no shutdown hooks."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> ServerProcess:
        self.stop()
        return self.start()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def namesrv(tmp_path: Path, extra: list[str] | None = None,
            channel_credentials: grpc.ChannelCredentials | None = None, **env: str) -> ServerProcess:
    address = f"127.0.0.1:{free_port()}"
    args = ["namesrv", "--listen", address] + (extra or [])
    return ServerProcess(args, address, tmp_path / "namesrv.log", env,
                         channel_credentials=channel_credentials)


def broker(
    tmp_path: Path,
    name: str = "broker-a",
    namesrv_address: str | None = None,
    flush: str = "sync",
    extra: list[str] | None = None,
    channel_credentials: grpc.ChannelCredentials | None = None,
    **env: str,
) -> ServerProcess:
    """A broker on a free port with its store under tmp_path/name (kept across restarts);
    `channel_credentials` for one started with --tls-cert."""
    address = f"127.0.0.1:{free_port()}"
    args = ["broker", "--listen", address, "--store-dir", str(tmp_path / name), "--broker-name", name,
            "--flush", flush]
    if namesrv_address:
        args += ["--namesrv", namesrv_address]
    return ServerProcess(args + (extra or []), address, tmp_path / f"{name}.log", env,
                         channel_credentials=channel_credentials)


def group_member(tmp_path: Path, name: str, broker_id: int, role: str, namesrv_address: str | None = None,
                 master: str | None = None, flush: str = "async", extra: list[str] | None = None,
                 **env: str) -> ServerProcess:
    """A member of broker group `name` (docs/replication.md): id 0 with role SYNC_MASTER or
    ASYNC_MASTER, or id 1.. with role SLAVE copying `master`; its store under
    tmp_path/<name>-<id> (kept across restarts)."""
    address = f"127.0.0.1:{free_port()}"
    member = f"{name}-{broker_id}"
    args = ["broker", "--listen", address, "--store-dir", str(tmp_path / member), "--broker-name", name,
            "--broker-id", str(broker_id), "--role", role, "--flush", flush]
    if master:
        args += ["--master", master]
    if namesrv_address:
        args += ["--namesrv", namesrv_address]
    return ServerProcess(args + (extra or []), address, tmp_path / f"{member}.log", env)
