"""Offset JSON, start-offset resolution (computePullFromWhere, spec pull TV-9) and admission
control (ReadLimit spreading)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadMaxBytes,
    ReadMaxFiles,
    ReadMaxRows,
    ReadMinRows,
)

from rmq.connector.client import MessageQueue
from rmq.connector.offsets import NO_OFFSET, OFFSET_READ_FAILED, positions_from_json, positions_to_json
from rmq.connector.spark.admission import admit, spread_bytes, spread_rows
from rmq.connector.spark.source_offsets import (
    AtTimestamp,
    Committed,
    Earliest,
    Latest,
    OffsetResolutionError,
    Specific,
    StreamOffset,
    Timestamps,
    resolve_acquired_offset,
    resolve_offset,
)

A0 = MessageQueue("t", "broker-a", 0)
A1 = MessageQueue("t", "broker-a", 10)
B0 = MessageQueue("t", "broker-b", 0)


def test_positions_json_is_nested_and_sorted():
    positions = {B0: 7, A1: 3, A0: 5, MessageQueue("s", "broker-a", 2): 1}
    as_json = positions_to_json(positions)
    assert json.dumps(as_json) == (
        '{"s": {"broker-a": {"2": 1}}, "t": {"broker-a": {"0": 5, "10": 3}, "broker-b": {"0": 7}}}'
    )
    assert positions_from_json(json.loads(json.dumps(as_json))) == positions


def test_stream_offset_round_trip_carries_the_client_id_and_group():
    offset = StreamOffset("host@spark-1", "spark-rmq-1f2e", {A0: 5, B0: 0})
    encoded = json.loads(json.dumps(offset.to_json()))
    assert (encoded["@clientId"], encoded["@group"]) == ("host@spark-1", "spark-rmq-1f2e")
    assert StreamOffset.from_json(encoded) == offset
    with pytest.raises(ValueError, match="not an rmq stream offset"):
        StreamOffset.from_json({"t": {"broker-a": {"0": 1}}})
    with pytest.raises(ValueError, match="'@group' of an rmq stream offset is not a string"):
        StreamOffset.from_json({"@clientId": "c", "@group": 7})


def test_stream_offset_checkpointed_before_the_group_key_has_no_group():
    old = StreamOffset.from_json({"@clientId": "host@spark-1", "t": {"broker-a": {"0": 5}}})
    assert old == StreamOffset("host@spark-1", None, {A0: 5})
    assert "@group" not in old.to_json()


@pytest.mark.parametrize("bad, message", [
    ([1], "expected a JSON object"),
    ({"t": 1}, "topic 't' must map to an object"),
    ({"t": {"b": []}}, "broker 'b' of topic 't' must map to an object"),
    ({"t": {"b": {"x": 1}}}, "queue id 'x' of t/b is not an integer >= 0"),
    ({"t": {"b": {"0": "5"}}}, "offset '5' of t/b/0 is not an integer >= 0"),
    ({"t": {"b": {"0": True}}}, "offset True of t/b/0"),
    ({"t": {"b": {"0": -1}}}, "offset -1 of t/b/0 is not an integer >= 0"),
])
def test_malformed_offset_json_is_rejected_with_the_reason(bad, message):
    with pytest.raises(ValueError, match=message):
        positions_from_json(bad)


@dataclass
class QueueTable:
    """Broker min/max offsets, saved group offsets and a timestamp index, as plain tables."""

    bounds: dict[MessageQueue, tuple[int, int]]
    committed: dict[MessageQueue, int] = field(default_factory=dict)
    by_time: dict[tuple[MessageQueue, int], int] = field(default_factory=dict)

    def min_offset(self, mq):
        return self.bounds[mq][0]

    def max_offset(self, mq):
        return self.bounds[mq][1]

    def search_offset(self, mq, timestamp_ms):
        return self.by_time[(mq, timestamp_ms)]

    def committed_offset(self, mq):
        return self.committed.get(mq, NO_OFFSET)


TABLE = QueueTable(bounds={A0: (10, 500), A1: (0, 0)}, committed={A0: 42}, by_time={(A0, 1000): 77})


@pytest.mark.parametrize("policy, mq, expected", [
    (Earliest(), A0, 10),
    (Latest(), A0, 500),
    (Committed(), A0, 42),          # saved offset wins
    (Committed(), A1, 0),           # nothing saved: latest
    (AtTimestamp(1000), A0, 77),
    (Specific({A0: -2}), A0, 10),
    (Specific({A0: -1}), A0, 500),
    (Specific({A0: 123}), A0, 123),
    (Specific({}, fallback=Earliest()), A0, 10),
])
def test_resolve_offset(policy, mq, expected):
    assert resolve_offset(policy, mq, TABLE) == expected


def test_timestamp_strategy_error_refuses_a_queue_without_a_message_at_or_after_it():
    """startingOffsetsByTimestampStrategy: latest (default) starts such a queue at its end, error fails."""
    table = QueueTable(bounds={A0: (10, 500)}, by_time={(A0, 1000): 77, (A0, 9000): 500})
    assert resolve_offset(AtTimestamp(9000), A0, table) == 500
    assert resolve_offset(AtTimestamp(1000, strict=True), A0, table) == 77
    for strict in (AtTimestamp(9000, strict=True), Timestamps({A0: 9000}, Latest(), strict=True)):
        with pytest.raises(OffsetResolutionError, match="no message of topic t broker broker-a queue 0 was "
                                                        "stored at or after timestamp 9000 "
                                                        r"\(startingOffsetsByTimestampStrategy=error"):
            resolve_offset(strict, A0, table)


def test_newly_owned_queue_starts_at_the_committed_offset_else_its_earliest():
    assert resolve_acquired_offset(A0, TABLE) == 42
    assert resolve_acquired_offset(A1, TABLE) == 0
    assert resolve_acquired_offset(A1, QueueTable({A1: (3, 9)})) == 3     # retention deleted [0, 3)
    unreadable = QueueTable({A0: (0, 9)}, committed={A0: OFFSET_READ_FAILED})
    assert resolve_acquired_offset(A0, unreadable) == OFFSET_READ_FAILED   # skipped this round
    with pytest.raises(OffsetResolutionError, match="could not read the committed offset of topic t"):
        resolve_offset(Committed(), A0, unreadable)


def test_max_rows_spread_evenly_then_to_the_queues_furthest_behind():
    start = {"q0": 0, "q1": 0, "q2": 0, "q3": 0}
    available = {"q0": 100, "q1": 100, "q2": 100, "q3": 100}
    assert spread_rows(start, available, 10) == {"q0": 3, "q1": 3, "q2": 2, "q3": 2}
    # The next batch gives the odd units to the queues left behind.
    second = spread_rows({"q0": 3, "q1": 3, "q2": 2, "q3": 2}, available, 10)
    assert second == {"q0": 5, "q1": 5, "q2": 5, "q3": 5}


def test_unused_shares_go_to_queues_with_a_backlog():
    start = {"q0": 0, "q1": 50, "q2": 0}
    available = {"q0": 2, "q1": 50, "q2": 1000}
    assert spread_rows(start, available, 100) == {"q0": 2, "q1": 50, "q2": 98}


def test_fewer_rows_than_queues_still_advances():
    assert spread_rows({"a": 0, "b": 0, "c": 0}, {"a": 5, "b": 5, "c": 5}, 1) == {"a": 1, "b": 0, "c": 0}
    assert spread_rows({"a": 1, "b": 0, "c": 0}, {"a": 5, "b": 5, "c": 5}, 1) == {"a": 1, "b": 1, "c": 0}


@given(
    backlog=st.dictionaries(st.sampled_from("abcdefgh"), st.tuples(st.integers(0, 1000), st.integers(0, 300)),
                            min_size=1),
    max_rows=st.integers(1, 2000),
)
def test_max_rows_is_never_exceeded_and_progress_is_guaranteed(backlog, max_rows):
    start = {key: first for key, (first, _) in backlog.items()}
    available = {key: first + pending for key, (first, pending) in backlog.items()}
    end = spread_rows(start, available, max_rows)
    granted = {key: end[key] - start[key] for key in start}
    total_pending = sum(pending for _, pending in backlog.values())
    assert all(0 <= granted[key] <= available[key] - start[key] for key in start)
    assert sum(granted.values()) == min(max_rows, total_pending)


def test_admit_per_read_limit():
    start, available = {"a": 5, "b": 0}, {"a": 9, "b": 2}
    assert admit(start, available, ReadAllAvailable()) == {"a": 9, "b": 2}
    assert admit(start, available, ReadMaxRows(2)) == {"a": 6, "b": 1}
    assert admit(start, available, ReadMinRows(6)) == {"a": 9, "b": 2}
    assert admit(start, available, ReadMinRows(7)) is None
    assert admit({"a": 5}, {"a": 3}, ReadAllAvailable()) == {"a": 5}    # never moves back
    with pytest.raises(ValueError, match="does not support the read limit"):
        admit(start, available, ReadMaxFiles(100))


def test_max_bytes_spread_by_each_queues_record_size():
    """maxBytesPerTrigger: the bytes are spread as rows are, each queue's messages weighing its
    record size; with maxMessagesPerTrigger both hold."""
    start, available = {"a": 0, "b": 0}, {"a": 100, "b": 100}
    sizes = {"a": 100, "b": 300}
    assert admit(start, available, ReadMaxBytes(3000), record_bytes=sizes) == {"a": 15, "b": 5}
    assert admit(start, available, ReadMaxRows(8), 3000, sizes) == {"a": 4, "b": 4}     # rows bind
    assert admit(start, available, ReadMaxRows(100), 3000, sizes) == {"a": 15, "b": 5}  # bytes bind
    assert admit(start, available, ReadAllAvailable(), 3000, sizes) == available        # Trigger.Once
    assert admit(start, {"a": 1, "b": 100}, ReadMaxBytes(3000), record_bytes=sizes) == {"a": 1, "b": 9}
    # a message larger than the limit still moves (a soft limit): the queue furthest behind first
    assert spread_bytes({"a": 3, "b": 0}, available, {"a": 5000, "b": 5000}, 1000) == {"a": 3, "b": 1}
    assert spread_bytes(start, start, sizes, 1000) == start                              # no backlog


@given(
    backlog=st.dictionaries(st.sampled_from("abcdefgh"),
                            st.tuples(st.integers(0, 1000), st.integers(0, 300), st.integers(1, 5000)),
                            min_size=1),
    max_bytes=st.integers(1, 200_000),
)
def test_max_bytes_is_exceeded_only_by_a_single_message_and_progress_is_guaranteed(backlog, max_bytes):
    start = {key: first for key, (first, _, _) in backlog.items()}
    available = {key: first + pending for key, (first, pending, _) in backlog.items()}
    sizes = {key: size for key, (_, _, size) in backlog.items()}
    end = spread_bytes(start, available, sizes, max_bytes)
    granted = {key: end[key] - start[key] for key in start}
    assert all(0 <= granted[key] <= available[key] - start[key] for key in start)
    taken = sum(granted[key] * sizes[key] for key in start)
    assert taken <= max_bytes or sum(granted.values()) == 1
    assert (sum(granted.values()) > 0) == any(pending for _, pending, _ in backlog.values())
