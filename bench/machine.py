"""Facts about the machine and software a benchmark run used, for the report header."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from importlib import metadata
from pathlib import Path


def load_average() -> str:
    """1/5/15-minute load averages: other work on this shared machine skews the figures."""
    return " / ".join(f"{load:.1f}" for load in os.getloadavg())


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (/proc/PID/stat utime + stime)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a process and all its descendants so far: each live one's utime + stime and
    the cutime + cstime of the children they waited for (/proc/PID/stat)."""
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:   # the process ended meanwhile
                continue
    children: dict[int, list[int]] = {}
    for child, fields in stats.items():
        children.setdefault(int(fields[1]), []).append(child)
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        fields = stats.get(current)
        if fields is not None:
            total += sum(int(value) for value in fields[11:15])
        pending += children.get(current, [])
    return total / os.sysconf("SC_CLK_TCK")


def facts(repo: Path) -> dict[str, str]:
    return {
        "source": source(repo),
        "cores": str(os.cpu_count()),
        "CPU": _cpu_model(),
        "memory": _memory(),
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        **{name: _version(name) for name in ("pyspark", "pyarrow", "numpy", "grpcio", "protobuf", "redis")},
        "redis-server": _command_output(["redis-server", "--version"]),
        "Java": _command_output(["java", "-version"]),
    }


def source(repo: Path) -> str:
    """The commit measured, and whether the tree differed from it."""
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=30, check=True).stdout.strip()
        changed = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                 capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout"
    return f"commit {commit}" + (" with uncommitted changes" if changed else "")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        with open("/proc/meminfo") as meminfo:
            kib = int(meminfo.readline().split()[1])
        return f"{kib / (1 << 20):.1f} GiB"
    except (OSError, ValueError, IndexError):
        return "unknown"


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def _command_output(command: list[str]) -> str:
    """First line of a command's output (java prints its version on stderr)."""
    if shutil.which(command[0]) is None:
        return "not installed"
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    lines = (done.stdout or done.stderr).splitlines()
    return lines[0].strip() if lines else "unknown"
