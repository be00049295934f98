"""RememberedReceives: the attempt-id replay memory of RocketMQ 5 receives is bounded in
entries and in the record bytes it holds, oldest forgotten first."""

from __future__ import annotations

from dataclasses import dataclass

from rmq.broker_server.processors.remembered_receives import RememberedReceives


@dataclass(frozen=True)
class Delivery:
    size: int


def key(n: int) -> tuple[str, str, str]:
    return ("g", "t", f"attempt-{n}")


def test_bounded_by_entries_oldest_first() -> None:
    remembered: RememberedReceives[Delivery] = RememberedReceives(max_entries=3, max_bytes=10**9)
    for n in range(5):
        remembered.put(key(n), [Delivery(10)])
    assert len(remembered) == 3 and remembered.bytes == 30
    assert remembered.get(key(1)) == [] and remembered.get(key(2)) == [Delivery(10)]


def test_bounded_by_bytes_and_a_replaced_entry_counts_once() -> None:
    remembered: RememberedReceives[Delivery] = RememberedReceives(max_entries=100, max_bytes=1000)
    remembered.put(key(0), [Delivery(400)])
    remembered.put(key(0), [Delivery(300), Delivery(300)])   # the same attempt again: replaced
    assert remembered.bytes == 600
    remembered.put(key(1), [Delivery(300)])
    assert remembered.bytes == 900 and len(remembered) == 2
    remembered.put(key(2), [Delivery(200)])                 # over 1000: the oldest goes
    assert remembered.get(key(0)) == [] and remembered.bytes == 500
    remembered.put(key(3), [Delivery(5000)])                # larger than the bound: kept by none
    assert len(remembered) == 0 and remembered.bytes == 0
