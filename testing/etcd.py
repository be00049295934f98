"""A real etcd (Debian's etcd-server, `make venv` installs it) on loopback for the controller's
tests: one member or a cluster of several, each on free ports with its own data directory, ready
once its /health answers; a member can be killed with SIGKILL and started again on its data.
With `tls`, clients must connect over TLS with a certificate the given CA signed."""

from __future__ import annotations

import json
import shutil
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from testing.processes import free_port

READY_TIMEOUT_S = 30.0


def etcd_missing() -> str | None:
    """Why etcd cannot run here (None when it can)."""
    return None if shutil.which("etcd") else "etcd not installed (make venv installs Debian's etcd-server)"


@dataclass(frozen=True)
class EtcdTls:
    """The CA clients trust, etcd's server certificate and key, and a client certificate and key."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


@dataclass
class EtcdMember:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    process: subprocess.Popen[bytes] | None = None
    tls: EtcdTls | None = None

    @property
    def client_url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.endpoint}"

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"

    def healthy(self) -> bool:
        context = None
        if self.tls is not None:
            context = ssl.create_default_context(cafile=str(self.tls.ca))
            context.load_cert_chain(str(self.tls.client_cert), str(self.tls.client_key))
        try:
            with urllib.request.urlopen(f"{self.client_url}/health", timeout=1, context=context) as answer:
                return bool(json.loads(answer.read()).get("health") == "true")
        except (OSError, ValueError, urllib.error.URLError):
            return False


class EtcdCluster:
    def __init__(self, directory: Path, size: int = 1, tls: EtcdTls | None = None) -> None:
        self.directory = directory
        self.tls = tls
        self.members = [EtcdMember(f"etcd{i}", free_port(), free_port(), directory / f"etcd{i}", tls=tls)
                        for i in range(size)]

    @property
    def endpoints(self) -> str:
        return ",".join(member.endpoint for member in self.members)

    def start(self) -> EtcdCluster:
        for member in self.members:
            self._spawn(member, "new")
        self.wait_healthy()
        return self

    def _spawn(self, member: EtcdMember, state: str) -> None:
        initial = ",".join(f"{m.name}={m.peer_url}" for m in self.members)
        tls = [] if self.tls is None else [
            "--cert-file", str(self.tls.server_cert), "--key-file", str(self.tls.server_key),
            "--client-cert-auth", "--trusted-ca-file", str(self.tls.ca)]
        log = open(self.directory / f"{member.name}.log", "ab")
        member.process = subprocess.Popen(
            ["etcd", "--name", member.name, "--data-dir", str(member.data_dir),
             "--listen-client-urls", member.client_url, "--advertise-client-urls", member.client_url, *tls,
             "--listen-peer-urls", member.peer_url, "--initial-advertise-peer-urls", member.peer_url,
             "--initial-cluster", initial, "--initial-cluster-state", state,
             "--initial-cluster-token", f"rmq-test-{self.members[0].peer_port}",
             "--heartbeat-interval", "100", "--election-timeout", "1000"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def wait_healthy(self, members: list[EtcdMember] | None = None) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        for member in members or self.members:
            while not member.healthy():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"etcd member {member.name} not healthy after {READY_TIMEOUT_S:g} "
                                       f"s; see {self.directory / (member.name + '.log')}")
                time.sleep(0.1)

    def kill(self, member: EtcdMember) -> None:
        if member.process is not None:
            member.process.send_signal(signal.SIGKILL)
            member.process.wait(10)
            member.process = None

    def restart(self, member: EtcdMember) -> None:
        self._spawn(member, "existing")

    def stop(self) -> None:
        for member in self.members:
            if member.process is not None:
                member.process.terminate()
                try:
                    member.process.wait(10)
                except subprocess.TimeoutExpired:
                    self.kill(member)
                member.process = None


def enable_auth(member: EtcdMember, root_password: str) -> None:
    """etcd's `auth enable` through its JSON gateway: a root user with `root_password`, then
    authentication on (every client must sign in from then on)."""
    for path, body in (("user/add", {"name": "root", "password": root_password}),
                       ("user/grant", {"user": "root", "role": "root"}), ("enable", {})):
        request = urllib.request.Request(f"{member.client_url}/v3/auth/{path}",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as answer:
            answer.read()
