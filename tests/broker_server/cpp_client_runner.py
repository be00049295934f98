"""Runs a scenario of the official RocketMQ 4.x C++ client (remoting_cpp_client.py) in its own
process, and says why it cannot run on this machine (skip reason).

PyPI `rocketmq` 0.4.4 (the C++ client's Python binding, bundling librocketmq.so) and the RocketMQ 5
client `rocketmq-python-client` both install a top-level `rocketmq` package, so the 4.x client is
not in the test extra: it is installed on first use into build/rocketmq-cpp-client and put first
on the path of the client's process only."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

from tests.broker_server.client_install import install_once

SCRIPT = Path(__file__).with_name("remoting_cpp_client.py")
PACKAGE = "rocketmq==0.4.4"
CLIENT_DIR = Path(__file__).resolve().parents[2] / "build" / "rocketmq-cpp-client"
CLIENT_TIMEOUT_S = 120


def client_env(home: Path | None = None) -> dict[str, str]:
    """The client's environment: the 4.x package first on its path; `home` for its logs and local
    (broadcasting) offsets, instead of the user's."""
    path = os.pathsep.join(filter(None, [str(CLIENT_DIR), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, **({"HOME": str(home)} if home else {})}


def _install() -> str | None:
    """Install the client into CLIENT_DIR (whole or not at all); the problem, or None."""
    if (CLIENT_DIR / "rocketmq" / "client.py").exists():
        return None
    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", PACKAGE, "--target"]
    return install_once(CLIENT_DIR, command, f"{PACKAGE} (the RocketMQ 4.x C++ client)")


@functools.cache
def cpp_client_problem() -> str | None:
    """Why the C++ client cannot run here, or None (its library loads in a separate process)."""
    problem = _install()
    if problem is not None:
        return problem
    try:
        loaded = subprocess.run(
            [sys.executable, "-c", "import rocketmq.client"],
            capture_output=True,
            text=True,
            timeout=60,
            env=client_env(),
        )
    except subprocess.TimeoutExpired:
        return "importing rocketmq.client timed out"
    if loaded.returncode:
        return f"the RocketMQ 4.x C++ client ({PACKAGE}) does not load: {loaded.stderr.strip()[-300:]}"
    return None


def start_client(home: Path, **scenario: object) -> subprocess.Popen:
    """A scenario running in the background (its HOME is `home`): read it with client_result."""
    return subprocess.Popen(
        [sys.executable, str(SCRIPT), json.dumps(scenario)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=client_env(home),
    )


def client_result(process: subprocess.Popen) -> dict:
    stdout, stderr = process.communicate(timeout=CLIENT_TIMEOUT_S)
    assert process.returncode == 0, stderr[-2000:]
    return json.loads(stdout.strip().splitlines()[-1])


def run_client(**scenario: object) -> dict:
    """The scenario's JSON result (remoting_cpp_client.py documents the scenarios)."""
    done = subprocess.run(
        [sys.executable, str(SCRIPT), json.dumps(scenario)],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        env=client_env(),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
