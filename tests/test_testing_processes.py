"""The process harness's ports (testing/processes.py): a broker binds its Flight and remoting
listeners to kernel-chosen ports by default, so a port the harness picks for a server it starts
later must never be one the kernel can hand out meanwhile, nor one it picked before."""

from __future__ import annotations

from testing.processes import ephemeral_port_range, free_port


def test_free_ports_are_below_the_kernelsephemeral_port_range_and_never_repeat() -> None:
    low, _high = ephemeral_port_range()
    ports = [free_port() for _ in range(500)]
    assert all(port < low for port in ports)
    assert len(set(ports)) == len(ports)
