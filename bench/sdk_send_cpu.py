"""`python -m bench.sdk_send_cpu [N]`: the SDK's CPU per single-message send (issue 41), per
thread of the sending process (/proc/self/task), with the broker's (a broker process at its
defaults: ASYNC flush, remoting port on), for `Producer.send` and `Producer.send_async`, N sends
each (3000) after 300 warm-up sends; `--profile` adds a cProfile of N sync sends (calls per send
and the top functions by own time)."""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench import machine
from rmq.connector import Message, Producer
from rmq.connector.client import RmqClient
from testing import processes

BODY = b"x" * 100
TOPIC = "sdk-send-cpu"


def thread_cpu_s() -> dict[str, float]:
    """thread name:id -> its CPU seconds so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    found = {}
    for task in Path("/proc/self/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        name = f"{(task / 'comm').read_text().strip()}:{task.name}"
        found[name] = (int(fields[11]) + int(fields[12])) / ticks
    return found


def report(label: str, count: int, broker_pid: int, run: Callable[[], object]) -> None:
    before, process_before = thread_cpu_s(), time.process_time()
    broker_before = machine.process_cpu_seconds(broker_pid)
    run()
    after = thread_cpu_s()
    broker = (machine.process_cpu_seconds(broker_pid) - broker_before) / count * 1e6
    client = (time.process_time() - process_before) / count * 1e6
    threads = {name: round((seconds - before.get(name, 0.0)) / count * 1e6, 1)
               for name, seconds in after.items() if seconds > before.get(name, 0.0)}
    print(f"{label}: client {client:.1f} µs/send, broker {broker:.1f} µs/send; by thread {threads}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.sdk_send_cpu")
    parser.add_argument("count", nargs="?", type=int, default=3000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    server = processes.broker(Path(tempfile.mkdtemp(prefix="rmq-send-cpu-")), flush="async").start()
    assert server.process is not None
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=8)
        with Producer(server.address) as producer:
            for _ in range(300):
                producer.send(Message(TOPIC, BODY))
            report("send", args.count, server.process.pid,
                   lambda: [producer.send(Message(TOPIC, BODY)) for _ in range(args.count)])
            report("send_async", args.count, server.process.pid,
                   lambda: [f.result() for f in [producer.send_async(Message(TOPIC, BODY))
                                                 for _ in range(args.count)]])
            if args.profile:
                profile = cProfile.Profile()
                profile.enable()
                for _ in range(args.count):
                    producer.send(Message(TOPIC, BODY))
                profile.disable()
                stats = pstats.Stats(profile)
                print(f"Python calls per sync send: {stats.total_calls / args.count:.0f}")   # type: ignore[attr-defined]
                stats.sort_stats("tottime").print_stats(15)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
