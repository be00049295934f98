"""JVM processes of the installed PySpark (SPARK_HOME = the pyspark package directory) for the
tests that run Spark the way users deploy it: a standalone Master and Worker, a Spark Connect
server, and the driver or client scripts those tests run in their own processes (only one
SparkContext per process, and the test session already has its local one). Loopback, free
ports; every process is started in its own session and stopped with its whole group."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from testing.processes import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent
START_TIMEOUT = 120.0   # a JVM start on a loaded 2-core machine


def spark_env(log_dir: Path) -> dict[str, str]:
    """Environment of every Spark process: this interpreter on driver and executors, loopback
    only, logs and pid files under the test's directory."""
    return {
        **os.environ,
        "SPARK_HOME": str(SPARK_HOME),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(log_dir),
        "SPARK_PID_DIR": str(log_dir),
    }


@dataclass
class JvmProcess:
    """A process started in its own session (its pid is its group's id), output to `log_path`."""

    process: subprocess.Popen
    log_path: Path

    @classmethod
    def start(cls, command: list[str], log_path: Path, env: dict[str, str]) -> JvmProcess:
        with open(log_path, "ab") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        return cls(process, log_path)

    def check_alive(self, what: str) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"{what} exited with code {self.process.returncode}:\n{self.log()[-3000:]}")

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the group (a Worker kills its executors on the way out), SIGKILL what is left."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def wait_until(check: Callable[[], bool], what: str, process: JvmProcess,
               timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        process.check_alive(what)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not ready after {timeout:.0f} s:\n{process.log()[-3000:]}")
        time.sleep(0.25)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1.0)
        return s.connect_ex(("127.0.0.1", port)) == 0


def alive_workers(web_ui_port: int) -> int:
    """Workers registered with a standalone Master, from its web UI's JSON."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{web_ui_port}/json/", timeout=2) as answer:
            return int(json.load(answer)["aliveworkers"])
    except OSError:
        return 0


@dataclass
class StandaloneCluster:
    url: str            # spark://127.0.0.1:<port>
    web_ui_port: int    # the Master's
    worker: JvmProcess

    def alive_workers(self) -> int:
        return alive_workers(self.web_ui_port)


@contextlib.contextmanager
def standalone_cluster(work_dir: Path, cores: int = 2, memory: str = "1g") -> Iterator[StandaloneCluster]:
    """A standalone Master and one Worker (`spark-class ...Master` / `...Worker`), yielded once
    the Master listens and the Worker is starting (a driver started meanwhile gets its executor
    when the Worker has registered: the JVMs start side by side). Executors the worker launches
    write their stdout/stderr under `work_dir`/worker/<app-id>/<executor-id>/."""
    work_dir.mkdir(parents=True, exist_ok=True)
    env = spark_env(work_dir)
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    port, ui_port = free_port(), free_port()
    url = f"spark://127.0.0.1:{port}"
    started: list[JvmProcess] = []
    try:
        master = JvmProcess.start(
            [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(ui_port)], work_dir / "master.log", env)
        started.append(master)
        wait_until(lambda: port_open(port), "the standalone Master", master)
        started.append(JvmProcess.start(
            [spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
             "--webui-port", str(free_port()), "--cores", str(cores), "--memory", memory,
             "--work-dir", str(work_dir / "worker")], work_dir / "worker.log", env))
        yield StandaloneCluster(url, ui_port, started[-1])
    finally:
        for process in reversed(started):
            process.stop()


@contextlib.contextmanager
def connect_server(work_dir: Path) -> Iterator[str]:
    """A Spark Connect server (`sbin/start-connect-server.sh --wait`, local[2]) on a free
    loopback port; yields its `sc://` URL once it listens."""
    work_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = JvmProcess.start(
        [str(SPARK_HOME / "sbin" / "start-connect-server.sh"), "--wait", "--master", "local[2]",
         "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
         "--conf", f"spark.connect.grpc.binding.port={port}",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
         "--conf", f"spark.pyspark.python={sys.executable}"],
        work_dir / "connect-server.log", spark_env(work_dir))
    try:
        wait_until(lambda: port_open(port), "the Spark Connect server", server)
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.stop()


class ScriptProcess:
    """A Python script of ours (driver or Connect client) with this interpreter: commands to its
    stdin one line each, one JSON line back on its stdout per command; its stderr in `log_path`."""

    def __init__(self, script: Path, args: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen([sys.executable, str(script), *args], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=log, env=env, text=True,
                                            start_new_session=True)

    def ask(self, command: str, timeout: float = 180.0) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            raise AssertionError(f"{command!r}: no answer (exit code {self.process.poll()}):\n"
                                 f"{self.log_path.read_text(errors='replace')[-4000:]}")
        return json.loads(line)

    def finish(self, timeout: float = 60.0) -> int:
        """Close its stdin (it stops Spark and exits); kill its group if it does not."""
        with contextlib.suppress(BrokenPipeError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            code = None
        with contextlib.suppress(ProcessLookupError):   # its JVM, if still there
            os.killpg(self.process.pid, signal.SIGKILL)
        return self.process.wait() if code is None else code
