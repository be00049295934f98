"""The process harness's ports (testing/processes.py): a broker binds its Flight and remoting
listeners to kernel-chosen ports by default, so a port the harness picks for a server it starts
later must never be one the kernel can hand out meanwhile, nor one it picked before. A server
that never answers is killed when the harness gives up on it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from testing.processes import ServerProcess, ephemeral_port_range, free_port


def test_free_ports_are_below_the_kernelsephemeral_port_range_and_never_repeat() -> None:
    low, _high = ephemeral_port_range()
    ports = [free_port() for _ in range(500)]
    assert all(port < low for port in ports)
    assert len(set(ports)) == len(ports)


def test_a_server_that_never_answers_is_killed_when_its_start_times_out(tmp_path: Path) -> None:
    """A broker that did not answer within ready_timeout (29 s to import on a machine at load 18)
    was left running after the test failed: it kept its port and its CPU for the rest of the run."""
    server = ServerProcess(["-c", "import time; time.sleep(60)"], f"127.0.0.1:{free_port()}",
                           tmp_path / "silent.log", ready_timeout=0.5, command=[sys.executable])
    with pytest.raises(TimeoutError, match="not ready after 0.5s; its log .*silent.log ends"):
        server.start()
    assert server.process is not None and server.process.poll() is not None
