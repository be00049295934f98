"""Runs a scenario of ali-ons (npm: a pure JavaScript RocketMQ 4.x client) in node, installing
ali-ons on first use into build/ali-ons (whole or not at all), and says why it cannot run here
(skip reason: no node/npm, or the package cannot be installed)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from pathlib import Path

from testing.client_install import install_once

SCRIPT = Path(__file__).with_name("remoting_ali_ons_client.js")
PACKAGE = "ali-ons@3.12.0"
INSTALL_DIR = Path(__file__).resolve().parents[2] / "build" / "ali-ons"
CLIENT_TIMEOUT_S = 120


def _install() -> str | None:
    if (INSTALL_DIR / "node_modules" / "ali-ons" / "package.json").exists():
        return None
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        return "ali-ons needs node and npm (Debian nodejs, npm), not found"
    command = [npm, "install", "--no-audit", "--no-fund", PACKAGE, "--prefix"]   # the folder comes last
    return install_once(INSTALL_DIR, command, PACKAGE)


@functools.cache
def ali_ons_problem() -> str | None:
    """Why ali-ons cannot run here, or None."""
    return _install()


def run_ali_ons(**scenario: object) -> dict:
    """The scenario's JSON result (remoting_ali_ons_client.js: produce or consume)."""
    env = {**os.environ, "NODE_PATH": str(INSTALL_DIR / "node_modules")}
    done = subprocess.run(
        ["node", str(SCRIPT), json.dumps(scenario)],
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
