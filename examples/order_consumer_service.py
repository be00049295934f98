"""A consumer service built on the rmq client SDK: it consumes the order events of
`examples.orders` with a PushConsumer and keeps running totals per status.

    python -m examples.order_consumer_service --endpoints 127.0.0.1:10911 --topic orders

Run several copies with the same `--group` and they split the topic's queues (clustering,
RocketMQ's avg allocation) and take over each other's queues when one stops or dies. An
event that is not valid JSON is answered RECONSUME_LATER: the broker redelivers it through
the group's retry topic at growing delays and, after `--max-reconsume-times`, keeps it in
the group's dead-letter queue (`rmq dlq list GROUP`). SIGTERM / Ctrl-C stop the service
cleanly: running listeners finish, offsets are persisted, the group rebalances at once.
`--max-messages` / `--idle-timeout` make it exit on its own (for tests and demos).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Sequence

from rmq.connector import ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, MessageExt, PushConsumer
from rmq.connector.client import RmqError


class OrderTotals:
    """The listener: per status, how many orders and their amount."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count: Counter[str] = Counter()
        self.amount: defaultdict[str, float] = defaultdict(float)
        self.consumed = 0
        self.last_message_at = time.monotonic()

    def __call__(
        self, messages: Sequence[MessageExt], context: ConsumeConcurrentlyContext
    ) -> ConsumeConcurrentlyStatus:
        try:
            events = [json.loads(m.body) for m in messages]
        except ValueError:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER  # retried later, then dead-lettered
        with self.lock:
            for event in events:
                self.count[event["status"]] += 1
                self.amount[event["status"]] += float(event["amount"])
            self.consumed += len(events)
            self.last_message_at = time.monotonic()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def report(self) -> str:
        with self.lock:
            lines = [
                f"{status}: {self.count[status]} orders, {self.amount[status]:.2f}"
                for status in sorted(self.count)
            ]
            return "\n".join(lines + [f"consumed {self.consumed} orders"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.order_consumer_service", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--endpoints", default="127.0.0.1:10911", help="name server(s) or broker(s)")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--group", default="order-totals")
    parser.add_argument(
        "--from",
        dest="consume_from",
        choices=("first", "last"),
        default="first",
        help="where a queue the group never consumed starts",
    )
    parser.add_argument("--max-reconsume-times", type=int, default=16)
    parser.add_argument("--max-messages", type=int, help="exit after consuming this many orders")
    parser.add_argument("--idle-timeout", type=float, help="exit after this many seconds without a message")
    args = parser.parse_args(argv)

    totals = OrderTotals()
    consumer = PushConsumer(
        args.group,
        args.endpoints,
        consume_from=args.consume_from,
        max_reconsume_times=args.max_reconsume_times,
    )
    consumer.subscribe(args.topic)
    consumer.register_message_listener(totals)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        consumer.start()
    except (ValueError, RmqError) as error:  # e.g. an unknown topic, unreachable brokers
        print(f"order service: cannot start: {error}", file=sys.stderr)
        return 2
    print(f"order service consuming {args.topic} as {consumer.client_id} in group {args.group}", flush=True)
    try:
        while not stop.wait(0.1):
            if args.max_messages is not None and totals.consumed >= args.max_messages:
                break
            if (
                args.idle_timeout is not None
                and time.monotonic() - totals.last_message_at > args.idle_timeout
            ):
                break
    finally:
        consumer.shutdown()
    print(totals.report(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
