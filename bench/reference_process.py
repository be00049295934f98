"""A reference server (Redis, NATS) as a child process: its executable from Debian's packages
(found on PATH, else installed once), a free loopback port, a log in its directory, a stop."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from testing.processes import free_port


def find_or_install(executable: str, package: str, unavailable: type[Exception]) -> str:
    """Path of `executable`; one `apt-get install package` when it is missing (root, as CI),
    else `unavailable` saying why."""
    path = shutil.which(executable)
    if path:
        return path
    try:
        for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", package]):
            subprocess.run(command, check=True, capture_output=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as error:
        raise unavailable(f"{executable} not on PATH and apt-get install {package} failed "
                          f"({error})") from error
    path = shutil.which(executable)
    if not path:
        raise unavailable(f"{executable} not on PATH after apt-get install {package}")
    return path


class ReferenceProcess:
    """One server process on a free loopback port, logging to `<work_dir>/<log_name>`."""

    def __init__(self, work_dir: Path) -> None:
        self.port = free_port()
        self.work_dir = work_dir
        self.process: subprocess.Popen | None = None

    def spawn(self, command: list[str], log_name: str) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with open(self.work_dir / log_name, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
