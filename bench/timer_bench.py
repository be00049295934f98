"""Section 17: timer messages (issue 45, docs/internals/timer.md) — a broker holding N pending
timers: how fast they are parked (timers acknowledged per second, lists of 256 with
TIMER_DELIVER_MS), the broker's memory growth with them all pending (anonymous memory, the
Python heap, against file-backed pages, the CommitLog and TimerLog mappings the kernel may drop),
and the lateness of deliveries at their second (store time of the delivered copy minus its
TIMER_DELIVER_MS) while they are pending.

    .venv/bin/python -m bench.timer_bench --pending 100000   # one run, figures printed
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from bench.environment import Environment
from bench.harness import Row, Stats, Target, percentile
from rmq import message_format as mf
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.connector.message import decode_messages
from rmq.message_queue import MessageQueue
from testing import processes

BATCH = 256
BODY = b"t" * 100
DUE_SECONDS = 5           # seconds whose deliveries are timed
DUE_PER_SECOND = 1000     # timers due in each of them
PENDING_FROM_S = 3600     # the pending ones come due an hour later and after, spread over a day
LATENESS_TARGET = Target(max_value=1200, unit="ms")
MEMORY_TARGET = Target(max_value=100, unit="MiB")


def memory_kib(server: processes.ServerProcess) -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of the server process, KiB."""
    assert server.process is not None
    with open(f"/proc/{server.process.pid}/status") as status:
        wanted = ("VmRSS", "RssAnon", "RssFile")
        fields = dict(line.split(":", 1) for line in status if line.startswith(wanted))
    return {name: int(value.split()[0]) for name, value in fields.items()}


def park(client: RmqClient, count: int, first_due_ms: int, spread_ms: int) -> float:
    """Send `count` timers due over [first_due_ms, first_due_ms + spread_ms); timers acknowledged
    per second."""
    start = time.perf_counter()
    for base in range(0, count, BATCH):
        size = min(BATCH, count - base)
        client.send("timed", [OutgoingMessage(BODY, properties={
            mf.PROPERTY_TIMER_DELIVER_MS: str(first_due_ms + (base + i) * spread_ms // count)})
            for i in range(size)])
    return count / (time.perf_counter() - start)


def delivered_lateness_ms(client: RmqClient, expected: int, timeout_s: float) -> list[float]:
    """Store time minus TIMER_DELIVER_MS of each delivered copy, once `expected` are in."""
    mq = MessageQueue("timed", "broker-a", 0)
    deadline = time.monotonic() + timeout_s
    lateness: list[float] = []
    offset = 0
    while len(lateness) < expected and time.monotonic() < deadline:
        result = client.pull(mq, offset, 1024, group="timer-bench", suspend_timeout_ms=1000)
        messages = decode_messages(result.messages, mq)
        offset += len(messages)
        lateness += [m.store_timestamp - int(m.properties[mf.PROPERTY_TIMER_DELIVER_MS]) for m in messages]
    return lateness


def measure(server: processes.ServerProcess, pending: int) -> dict[str, float]:
    with RmqClient(server.address) as client:
        client.create_topic("timed", queues=1)
        before = memory_kib(server)
        now_ms = int(time.time() * 1000)
        rate = park(client, pending, now_ms + PENDING_FROM_S * 1000, 86_400_000)
        due_from = (int(time.time()) + 3) * 1000
        for second in range(DUE_SECONDS):
            park(client, DUE_PER_SECOND, due_from + second * 1000, 1000)
        lateness = delivered_lateness_ms(client, DUE_SECONDS * DUE_PER_SECOND, 60 + pending / 5000)
        after = memory_kib(server)
    return {"enqueue_per_s": rate, "anon_mib": (after["RssAnon"] - before["RssAnon"]) / 1024,
            "file_mib": (after["RssFile"] - before["RssFile"]) / 1024,
            "rss_mib": (after["VmRSS"] - before["VmRSS"]) / 1024,
            "p50_ms": percentile(lateness, 0.5), "p99_ms": percentile(lateness, 0.99),
            "delivered": len(lateness)}


def timer_rows(env: Environment) -> list[Row]:
    pending = 1_000_000 if env.scale.produce_messages >= 100_000 else 20_000
    with env.broker("broker-a") as server:
        figures = measure(server, pending)
    note = (f"{pending:,} pending; RSS growth {figures['rss_mib']:.0f} MiB of which file-backed (CommitLog, "
            f"TimerLog mappings) {figures['file_mib']:.0f} MiB")
    return [
        Row(f"Timers parked per second ({pending:,} pending, lists of {BATCH})", "msg/s",
            Stats.of([figures["enqueue_per_s"]])),
        Row(f"Broker anonymous memory growth with {pending:,} timers pending", "MiB",
            Stats.of([figures["anon_mib"]]), target=MEMORY_TARGET, note=note),
        Row(f"Timer delivery lateness p50 at the due second ({pending:,} pending)", "ms",
            Stats.of([figures["p50_ms"]])),
        Row(f"Timer delivery lateness p99 at the due second ({pending:,} pending)", "ms",
            Stats.of([figures["p99_ms"]]), target=LATENESS_TARGET),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.timer_bench")
    parser.add_argument("--pending", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        server = processes.broker(Path(directory), flush="async").start()
        try:
            figures = measure(server, args.pending)
        finally:
            server.stop()
    for name, value in figures.items():
        print(f"{name:>14}: {value:,.1f}")


if __name__ == "__main__":
    main()
