"""A private network for a chaos run: a bridge inside a namespace of its own, one namespace
per member joined to it by a veth pair, addresses on a /24 that exists only inside these
namespaces (nothing is added to the root namespace), and the faults the network can take.

A partition is made with permanent neighbour entries pointing at a MAC nobody owns, on both
sides: frames to the other side are flooded by the bridge and dropped by every receiver, so
established TCP connections see silence (as OpenChaos's iptables DROP gives), not an error.
Packet loss needs the kernel's netem qdisc; `loss_unavailable()` says why when it is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

NOWHERE_MAC = "02:00:00:00:00:01"   # locally administered; no member's interface has it
DEVICE = "eth0"                    # the member's end of its veth pair, inside its namespace


class NetnsError(RuntimeError):
    """An `ip` / `tc` command failed (its stderr says why)."""


def ip(*args: str, namespace: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = ["ip", *(["-n", namespace] if namespace else []), *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise NetnsError(f"{' '.join(command)}: {done.stderr.strip()}")
    return done


def unavailable() -> str | None:
    """Why chaos runs cannot run here, or None: they need root and iproute2's `ip netns`."""
    if os.geteuid() != 0:
        return "chaos runs need root (network namespaces, veth pairs)"
    if shutil.which("ip") is None:
        return "chaos runs need iproute2's `ip` (ip netns)"
    probe = f"rmqprobe{os.getpid()}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if done.returncode != 0:
        return f"`ip netns add` fails here: {done.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass
class Network:
    """The bridge namespace and the members' namespaces of one run (`run` tags every name,
    so two runs on one machine never meet). Use as a context manager: leaving it deletes
    every namespace it made, killing whatever still runs in them."""

    run: str                                   # a few hex digits
    subnet: str                                # "10.213.N" (a /24)
    addresses: dict[str, str] = field(default_factory=dict)   # member -> its IPv4 address
    macs: dict[str, str] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)

    @property
    def bridge_namespace(self) -> str:
        return f"rmqchaos-{self.run}-br"

    def namespace(self, member: str) -> str:
        return f"rmqchaos-{self.run}-{member}"

    def __enter__(self) -> Network:
        self._add_namespace(self.bridge_namespace)
        ip("link", "add", "br0", "type", "bridge", namespace=self.bridge_namespace)
        ip("link", "set", "br0", "up", namespace=self.bridge_namespace)
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    def _add_namespace(self, name: str) -> None:
        ip("netns", "add", name)
        self.namespaces.append(name)
        ip("link", "set", "lo", "up", namespace=name)

    def add_member(self, member: str) -> str:
        """A namespace for `member`, joined to the bridge; its address."""
        index = len(self.addresses) + 2
        namespace = self.namespace(member)
        self._add_namespace(namespace)
        outer, inner = f"rc{self.run}{index}a", f"rc{self.run}{index}b"
        ip("link", "add", outer, "type", "veth", "peer", "name", inner)
        ip("link", "set", outer, "netns", self.bridge_namespace)
        ip("link", "set", inner, "netns", namespace)
        ip("link", "set", inner, "name", DEVICE, namespace=namespace)
        ip("link", "set", outer, "master", "br0", namespace=self.bridge_namespace)
        ip("link", "set", outer, "up", namespace=self.bridge_namespace)
        address = f"{self.subnet}.{index}"
        ip("addr", "add", f"{address}/24", "dev", DEVICE, namespace=namespace)
        ip("link", "set", DEVICE, "up", namespace=namespace)
        self.addresses[member] = address
        self.macs[member] = ip("-brief", "link", "show", DEVICE, namespace=namespace).stdout.split()[2]
        return address

    def exec_prefix(self, member: str) -> list[str]:
        """What runs a command inside `member`'s namespace (ip execs it: same pid)."""
        return ["ip", "netns", "exec", self.namespace(member)]

    def cut(self, side_a: list[str], side_b: list[str]) -> None:
        """Every member of side_a stops hearing every member of side_b, and back."""
        for a in side_a:
            for b in side_b:
                self._neighbour(a, b, NOWHERE_MAC)
                self._neighbour(b, a, NOWHERE_MAC)

    def heal(self) -> None:
        """Every member hears every other again (the real MACs, permanent: no ARP race)."""
        for a in self.addresses:
            for b in self.addresses:
                if a != b:
                    self._neighbour(a, b, self.macs[b])

    def _neighbour(self, member: str, other: str, mac: str) -> None:
        ip("neigh", "replace", self.addresses[other], "lladdr", mac, "dev", DEVICE, "nud", "permanent",
           namespace=self.namespace(member))

    def loss_unavailable(self) -> str | None:
        """Why `tc netem` loss cannot be set here, or None (tried on the bridge namespace)."""
        if shutil.which("tc") is None:
            return "tc (iproute2) is not installed"
        done = self.tc(self.bridge_namespace, "qdisc", "add", "dev", "lo", "root", "netem", "loss", "1%",
                       check=False)
        if done.returncode != 0:
            return f"the kernel has no netem qdisc (tc: {done.stderr.strip()})"
        self.tc(self.bridge_namespace, "qdisc", "del", "dev", "lo", "root")
        return None

    def tc(self, namespace: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = ["ip", "netns", "exec", namespace, "tc", *args]
        done = subprocess.run(command, capture_output=True, text=True)
        if check and done.returncode != 0:
            raise NetnsError(f"{' '.join(command)}: {done.stderr.strip()}")
        return done

    def set_loss(self, member: str, percent: int | None) -> None:
        """netem loss of `percent` on member's interface (None: removed)."""
        namespace = self.namespace(member)
        if percent is None:
            self.tc(namespace, "qdisc", "del", "dev", DEVICE, "root", check=False)
        else:
            self.tc(namespace, "qdisc", "replace", "dev", DEVICE, "root", "netem", "loss", f"{percent}%")

    def teardown(self) -> None:
        """Kill what runs in the namespaces, then delete them (idempotent; never raises)."""
        for name in reversed(self.namespaces):
            listed = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
            pids = listed.stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self.namespaces.clear()
