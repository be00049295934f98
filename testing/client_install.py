"""Installing a real 4.x client no one here wrote (the C++ client from PyPI, ali-ons from npm)
into build/ once, whole or not at all, for the remoting tests."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

INSTALL_TIMEOUT_S = 600


def install_once(target: Path, command: list[str], what: str) -> str | None:
    """Run `command` + [staging folder] and move the result to `target` (a concurrent run may win:
    its copy is kept); the problem in one line, or None when `target` is there."""
    staging = target.with_name(f"{target.name}.{os.getpid()}")
    try:
        done = subprocess.run([*command, str(staging)], capture_output=True, text=True,
                              timeout=INSTALL_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"installing {what} timed out"
    if done.returncode:
        shutil.rmtree(staging, ignore_errors=True)
        return f"cannot install {what}: {done.stderr.strip()[-300:]}"
    try:
        staging.rename(target)
    except OSError:  # installed meanwhile by another run
        shutil.rmtree(staging, ignore_errors=True)
    return None
