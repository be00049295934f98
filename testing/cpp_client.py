"""The official RocketMQ 4.x C++ client (PyPI `rocketmq` 0.4.4, the C++ client's Python binding
bundling librocketmq.so), installed on first use into build/rocketmq-cpp-client, for the remoting
tests and the benchmark's one-message-per-request rows.

It and the RocketMQ 5 client `rocketmq-python-client` both install a top-level `rocketmq` package,
so the 4.x client is not in the test extra: it runs in a process of its own whose path puts
CLIENT_DIR first (`client_env`)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

from testing.client_install import install_once

PACKAGE = "rocketmq==0.4.4"
CLIENT_DIR = Path(__file__).resolve().parents[1] / "build" / "rocketmq-cpp-client"


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
