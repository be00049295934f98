"""Lag per queue from a streaming progress report's end and latest offsets."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark")

from rmq.connector.spark.lag import queue_lags  # noqa: E402


def offset(**queues: int) -> str:
    by_id = {queue.removeprefix("q"): value for queue, value in queues.items()}
    return json.dumps({"@clientId": "c", "@group": "g", "t": {"broker-a": by_id}})


def test_messages_behind_per_queue():
    assert queue_lags(offset(q0=10, q1=4), offset(q0=25, q1=4)) == [15, 0]
    assert queue_lags(offset(q0=10), offset(q0=25, q1=7)) == [15]      # q1 owned since: not yet read
    assert queue_lags(offset(q0=30), offset(q0=25)) == [0]             # never negative


def test_other_sources_and_missing_offsets_are_not_rmq_lag():
    assert queue_lags('{"logOffset": 3}', '{"logOffset": 5}') is None
    assert queue_lags(None, offset(q0=1)) is None
    assert queue_lags(offset(q0=1), "not json") is None
