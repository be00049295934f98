"""OffsetChanges: what a transfer stream sends a slave of the consumer offsets committed since
it last sent (the latest offset per queue, oldest change first, bounded)."""

from __future__ import annotations

from rmq.broker_server.offsets.consumer_offset_manager import OffsetKey
from rmq.broker_server.offsets.offset_changes import OffsetChanges


def offsets(changes: OffsetChanges, number: int) -> tuple[list[tuple[str, int, int]], int]:
    changed, last = changes.since(number)
    return [(item.consumer_group, item.queue_id, item.offset) for item in changed], last


def test_each_stream_gets_the_latest_offset_per_queue_changed_since_it_last_sent() -> None:
    changes = OffsetChanges(capacity=100)
    start = changes.count
    changes.committed(OffsetKey("g", "t", 0), 5)
    changes.committed(OffsetKey("g", "t", 1), 7)
    changes.committed(OffsetKey("g", "t", 0), 9)   # the queue's newer offset replaces its older change
    sent, last = offsets(changes, start)
    assert sent == [("g", 1, 7), ("g", 0, 9)]
    assert offsets(changes, last) == ([], last)
    changes.committed(OffsetKey("h", "t", 0), 1)
    assert offsets(changes, last) == ([("h", 0, 1)], last + 1)


def test_the_changes_kept_are_bounded() -> None:
    changes = OffsetChanges(capacity=3)
    for queue_id in range(10):
        changes.committed(OffsetKey("g", "t", queue_id), queue_id)
    assert offsets(changes, 0)[0] == [("g", 7, 7), ("g", 8, 8), ("g", 9, 9)]
