"""Sample order events produced by the demo and the ETL example's tests.

One event is a JSON object `{"order_id", "customer", "status", "amount", "ts"}` (`ts` in
epoch milliseconds); the message's tag is the status and its key the order id.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

STATUSES = ("created", "paid", "shipped", "cancelled")


@dataclass(frozen=True)
class OrderEvent:
    order_id: str
    customer: str
    status: str
    amount: float
    ts: int

    def body(self) -> bytes:
        return json.dumps(
            {"order_id": self.order_id, "customer": self.customer, "status": self.status,
             "amount": self.amount, "ts": self.ts},
            separators=(",", ":"),
        ).encode()


def order_events(count: int, start_ms: int, step_ms: int = 1000, seed: int = 7) -> Iterator[OrderEvent]:
    """`count` events, one every `step_ms` from `start_ms`, deterministic for a seed."""
    rng = random.Random(seed)
    for i in range(count):
        yield OrderEvent(
            order_id=f"order-{i:06d}",
            customer=f"customer-{rng.randrange(100):03d}",
            status=rng.choice(STATUSES),
            amount=round(rng.uniform(1, 500), 2),
            ts=start_ms + i * step_ms,
        )


def main(argv: list[str] | None = None) -> int:
    """Print events as JSON lines, e.g. `python -m examples.orders --count 1000 | rmq produce orders`."""
    parser = argparse.ArgumentParser(prog="python -m examples.orders", description="sample order events")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--step-ms", type=int, default=1000, help="event-time distance between events")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    start_ms = int(time.time() * 1000) - args.count * args.step_ms
    for event in order_events(args.count, start_ms, args.step_ms, args.seed):
        print(event.body().decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
