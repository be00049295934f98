"""Runs a scenario of the official RocketMQ 4.x C++ client (remoting_cpp_client.py) in its own
process (testing.cpp_client installs and loads it, and says why it cannot run on this machine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from testing.cpp_client import client_env
from testing.cpp_client import cpp_client_problem as cpp_client_problem

SCRIPT = Path(__file__).with_name("remoting_cpp_client.py")
CLIENT_TIMEOUT_S = 120


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
