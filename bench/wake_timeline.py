"""Where a long-poll wake's time goes (row 4's profile): the latency benchmark's wake (a held
pull woken by a one-message send from a second client, both in this process) against a broker
whose send, put, hold, read and answer steps write a timestamp at entry and exit. Both
processes stamp with time.perf_counter (CLOCK_MONOTONIC on Linux: one clock across processes).
Prints each step's median time after the send started, over the samples.

    python -m bench.wake_timeline [--samples N]
    python -m bench.wake_timeline --serve TRACE_FILE BROKER_ARGS...   # the traced broker itself

A diagnostic, not a benchmark row: the wrappers add a few microseconds per step."""

from __future__ import annotations

import argparse
import functools
import inspect
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.broker_bench import LONG_POLL_SUSPEND_MS, SETTLE_S
from bench.environment import FLUSH, Environment, Scale, _running
from bench.harness import wake_latency_ms
from bench.workload import GROUP, body_of, single_queue
from rmq.broker_server.long_polling import pull_request_hold_service as long_polling
from rmq.broker_server.processors import pull_message_processor, send_message_processor
from rmq.broker_server.rmq_v1 import messaging_service
from rmq.cli.main import main as rmq_main
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.store import message_store
from testing import processes

START = "client: send called"
SEND_RETURNED = "client: send returned"
PULL_RETURNED = "client: held pull returned"


class Trace:
    """Appends "name time" lines to a file shared by both processes (O_APPEND: whole lines)."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)

    def event(self, name: str) -> None:
        os.write(self._fd, f"{time.perf_counter():.7f} {name}\n".encode())

    def wrap(self, owner: Any, name: str, label: str) -> None:
        """Stamp `label` at entry and exit of owner.name (a function or a coroutine function)."""
        original = getattr(owner, name)
        if inspect.iscoroutinefunction(original):
            async def traced(*args: Any, **kwargs: Any) -> Any:
                self.event(f"{label} (in)")
                result = await original(*args, **kwargs)
                self.event(f"{label} (out)")
                return result
        else:
            def traced(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
                self.event(f"{label} (in)")
                result = original(*args, **kwargs)
                self.event(f"{label} (out)")
                return result
        setattr(owner, name, functools.wraps(original)(traced))


def serve(trace_file: Path, broker_args: list[str], extra: Sequence[tuple[Any, str, str]] = ()) -> int:
    """Run `rmq <broker_args>` in this process with the wake path's steps traced, and the
    `extra` (owner, method name, label) steps."""
    trace = Trace(trace_file)
    for owner, name, label in extra:
        trace.wrap(owner, name, label)
    trace.wrap(messaging_service.MessagingService, "SendMessage", "broker: SendMessage handler")
    trace.wrap(send_message_processor.SendMessageProcessor, "build_batch", "broker: build the batch")
    trace.wrap(message_store.MessageStore, "try_put_batch", "broker: put on the event loop")
    trace.wrap(message_store.MessageStore, "put_batch", "broker: put on a store thread")
    trace.wrap(long_polling.PullRequestHoldService, "notify_message_arriving", "broker: dispatch notifies")
    trace.wrap(long_polling.PullRequestHoldService, "suspend", "broker: pull held")
    trace.wrap(pull_message_processor.PullMessageProcessor, "get_message", "broker: woken pull reads")
    trace.wrap(messaging_service.MessagingService, "PullMessage", "broker: PullMessage handler")
    return rmq_main(broker_args)


def timeline(samples: int) -> list[tuple[str, float, int]]:
    """(step, median ms after the send was called, samples seen) in time order."""
    env = Environment(Scale.quick())
    trace_file = env.directory("wake-timeline") / "trace.txt"
    trace_file.unlink(missing_ok=True)
    trace = Trace(trace_file)
    server = processes.broker(env.directory("wake-timeline"), name="broker-a", flush=FLUSH)
    server.command = [sys.executable, "-m", "bench.wake_timeline", "--serve", str(trace_file)]
    with _running(server), RmqClient(server.address) as consumer, RmqClient(server.address) as producer:
        producer.create_topic("wake-timeline", queues=1)
        mq = single_queue(consumer, "wake-timeline")
        message = [OutgoingMessage(body=body_of(100), queue_id=0)]
        offset = [0]

        def held_pull() -> None:
            result = consumer.pull(mq, offset[0], 32, group=GROUP, suspend_timeout_ms=LONG_POLL_SUSPEND_MS)
            trace.event(PULL_RETURNED)
            offset[0] = result.next_begin_offset

        def send() -> None:
            trace.event(START)
            producer.send("wake-timeline", message)
            trace.event(SEND_RETURNED)

        for _ in range(20):   # warm-up, not traced
            wake_latency_ms(held_pull, send, SETTLE_S)
        os.truncate(trace_file, 0)
        for _ in range(samples):
            wake_latency_ms(held_pull, send, SETTLE_S)
    return step_medians(trace_file.read_text().splitlines(), _answered)


def step_medians(lines: list[str], done: Callable[[dict[str, float]], bool]) -> list[tuple[str, float, int]]:
    """Each sample's events relative to its START (the first stamp of each step per sample,
    until `done` says the sample is over)."""
    wakes: list[dict[str, float]] = []
    for line in lines:
        stamp, name = line.split(" ", 1)
        if name == START:
            wakes.append({START: float(stamp)})
        elif wakes and name not in wakes[-1] and not done(wakes[-1]):
            wakes[-1][name] = float(stamp)
    steps: dict[str, list[float]] = {}
    for wake in wakes:
        for name, stamp in wake.items():
            steps.setdefault(name, []).append((stamp - wake[START]) * 1000)
    rows = [(name, statistics.median(times), len(times)) for name, times in steps.items()]
    return sorted(rows, key=lambda row: row[1])


def _answered(wake: dict[str, float]) -> bool:
    """Both calls have returned: what follows belongs to the next wake (its held pull)."""
    return SEND_RETURNED in wake and PULL_RETURNED in wake


def main() -> int:
    return timeline_main(__doc__, serve, timeline, "the send was called", "wakes")


Steps = list[tuple[str, float, int]]


def timeline_main(doc: str | None, serve: Callable[[Path, list[str]], int], timeline: Callable[[int], Steps],
                  start: str, samples: str) -> int:
    """A timeline diagnostic's command line: `--serve` runs its traced broker, else it prints
    the timeline as a markdown table, each step with its gap to the one before."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--serve", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(Path(args.serve[0]), args.serve[1:])
    rows = timeline(args.samples)
    print(f"| step | median ms after {start} | {samples} | (load {os.getloadavg()[0]:.2f})")
    print("| --- | --- | --- |")
    previous = 0.0
    for name, median, count in rows:
        print(f"| {name} | {median:.3f} (+{median - previous:.3f}) | {count} |")
        previous = median
    return 0


if __name__ == "__main__":
    sys.exit(main())
