"""The broker's cost of one message per request (issue 41; bench/NOTES.md "One message per
request"): a broker process at its defaults (ASYNC flush, remoting port on) is sent `--count`
single-message requests, one at a time from one thread, over each protocol:

- remoting: rmq's `Producer.send(Message)`, which takes the broker's remoting port for one
  message (docs/client-behaviour.md "Transport");
- rmq.v1 gRPC: the same with the broker's remoting port off;
- RocketMQ 5 gRPC: the official `rocketmq-python-client` Producer's `send` (skipped when it is
  not installed).

For each it prints the broker's CPU per request (its /proc/<pid>/stat utime + stime over the run,
divided by the count) and, in a second run, the Python function calls per request on the broker's
event-loop thread (cProfile enabled after start-up and warm-up by SIGUSR1, dumped by SIGUSR2),
with the functions that cost the most. `python -m bench.per_request_cost --count 5000`."""

from __future__ import annotations

import argparse
import os
import pstats
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rmq.connector import Message, Producer
from rmq.connector.client import RmqClient
from testing import processes

TOPIC = "per-request"
BODY = b"x" * 100
WARMUP = 200
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# Runs `rmq broker ...` with SIGUSR1 / SIGUSR2 starting and dumping a profile of the main (event
# loop) thread; the profile goes to the file named by the first argument.
PROFILED_BROKER = r"""
import cProfile, signal, sys
profile_path = sys.argv.pop(1)
profiler = cProfile.Profile()
signal.signal(signal.SIGUSR1, lambda *_: profiler.enable())
def dump(*_):
    profiler.disable()
    profiler.dump_stats(profile_path)
signal.signal(signal.SIGUSR2, dump)
from rmq.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def broker_cpu_s(pid: int) -> float:
    """utime + stime of the whole broker process, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@contextmanager
def broker(directory: Path, remoting: bool, profile: Path | None) -> Iterator[processes.ServerProcess]:
    extra = [] if remoting else ["--remoting-listen", "off"]
    server = processes.broker(directory, flush="async", extra=extra)
    if profile is not None:
        server.command = [sys.executable, "-c", PROFILED_BROKER, str(profile)]
    server.start()
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=8)
        yield server
    finally:
        server.stop()


def rmq_sender(address: str) -> tuple[Callable[[], object], Callable[[], None]]:
    producer = Producer(address)
    producer.start()
    return (lambda: producer.send(Message(TOPIC, BODY))), producer.shutdown


def rocketmq_v2_sender(address: str) -> tuple[Callable[[], object], Callable[[], None]]:
    import rocketmq  # rocketmq-python-client

    config = rocketmq.ClientConfiguration(address, rocketmq.Credentials())
    producer = rocketmq.Producer(config, (TOPIC,))
    producer.startup()

    def send() -> Any:
        message = rocketmq.Message()
        message.topic, message.body = TOPIC, BODY
        return producer.send(message)
    return send, producer.shutdown


SENDERS = {
    "remoting (rmq Producer.send)": (True, rmq_sender),
    "rmq.v1 gRPC (rmq Producer.send, remoting off)": (False, rmq_sender),
    "RocketMQ 5 gRPC (official Producer.send)": (True, rocketmq_v2_sender),
}


def measure(name: str, count: int, profile: bool, top: int, sort: str = "tottime") -> str:
    remoting, make_sender = SENDERS[name]
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        profile_path = directory / "broker.prof" if profile else None
        with broker(directory, remoting, profile_path) as server:
            assert server.process is not None
            pid = server.process.pid
            send, close = make_sender(server.address)
            try:
                for _ in range(WARMUP):
                    send()
                if profile_path is not None:
                    os.kill(pid, signal.SIGUSR1)
                    time.sleep(0.2)
                before = broker_cpu_s(pid)
                for _ in range(count):
                    send()
                spent = broker_cpu_s(pid) - before
                if profile_path is not None:
                    os.kill(pid, signal.SIGUSR2)
                    while not profile_path.exists() or profile_path.stat().st_size == 0:
                        time.sleep(0.05)
                    time.sleep(0.2)
            finally:
                close()
            if profile_path is None:
                return f"{name}: broker CPU {spent / count * 1e6:.0f} us per send ({count} sends)"
            stats = pstats.Stats(str(profile_path))
            calls = stats.total_calls / count  # type: ignore[attr-defined]
            lines = [f"{name}: {calls:.0f} Python function calls per send on the broker's loop thread "
                     f"({count} sends)"]
            with tempfile.TemporaryFile("w+") as out:
                stats.stream = out  # type: ignore[attr-defined]
                stats.sort_stats(sort).print_stats(top)
                out.seek(0)
                lines.append(out.read())
            return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--profile", action="store_true", help="count Python calls instead of CPU")
    parser.add_argument("--top", type=int, default=25, help="functions listed per profile")
    parser.add_argument("--sort", default="tottime", help="the profile's order (a pstats sort key)")
    parser.add_argument("--only", choices=("remoting", "v1", "v2"), default=None)
    args = parser.parse_args()
    names = list(SENDERS)
    if args.only:
        names = [names[("remoting", "v1", "v2").index(args.only)]]
    for name in names:
        try:
            print(measure(name, args.count, args.profile, args.top, args.sort), flush=True)
        except ImportError as error:
            print(f"{name}: not measured ({error})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
