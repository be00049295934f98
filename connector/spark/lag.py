"""Consumer lag of rmq streaming queries without the broker's CLI (docs/manual/spark.md,
"Lag without the CLI").

Python sources cannot add metrics to Spark's progress reports, but every report carries
the source's end offset (what the finished micro-batch read up to) and its latest offset
(the queues' max offsets when the batch was planned, `reportLatestOffset`). The listener
turns the two into messages behind per queue and keeps min / avg / max / total per query,
logging one line per progress report:

    from rmq.connector.spark.lag import RmqLagListener
    lag = RmqLagListener()
    spark.streams.addListener(lag)
    ...
    lag.of(query)      # QueryLag(queues=8, min=0, avg=12.5, max=40, total=100, ...) or None
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)
from pyspark.sql.streaming.query import StreamingQuery

from rmq.connector.spark.source_offsets import CLIENT_ID_KEY, StreamOffset

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueryLag:
    """Messages behind the latest offset over a query's queues, after micro-batch `batch_id`."""

    query_id: str
    name: str | None
    batch_id: int
    queues: int
    min: int
    avg: float
    max: int
    total: int


def queue_lags(end_offset: str | None, latest_offset: str | None) -> list[int] | None:
    """Messages behind per queue from a source's progress, over the queues both offsets
    name (None: not an rmq source, or no offsets yet)."""
    end, latest = _stream_offset(end_offset), _stream_offset(latest_offset)
    if end is None or latest is None:
        return None
    return [max(top - end.positions[mq], 0) for mq, top in sorted(latest.positions.items())
            if mq in end.positions]


def _stream_offset(text: str | None) -> StreamOffset | None:
    if not text:
        return None
    try:
        obj: Any = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or CLIENT_ID_KEY not in obj:
        return None
    return StreamOffset.from_json(obj)


class RmqLagListener(StreamingQueryListener):
    """Keeps the lag of each query reading from rmq (by query id) and logs it."""

    def __init__(self, level: int = logging.INFO) -> None:
        self._level = level
        self._lock = threading.Lock()
        self._lags: dict[str, QueryLag] = {}

    def of(self, query: StreamingQuery) -> QueryLag | None:
        """The lag after the query's last progress report (None before its first)."""
        with self._lock:
            return self._lags.get(str(query.id))

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        lags: list[int] = []
        found = False
        for source in progress.sources:
            per_queue = queue_lags(source.endOffset, source.latestOffset)
            if per_queue is not None:
                found = True
                lags += per_queue
        if not found:
            return
        lag = QueryLag(str(progress.id), progress.name, progress.batchId, len(lags), min(lags, default=0),
                       sum(lags) / len(lags) if lags else 0.0, max(lags, default=0), sum(lags))
        with self._lock:
            self._lags[lag.query_id] = lag
        logger.log(self._level, "rmq lag of query %s batch %d: %d queues, min %d, avg %.1f, max %d, total %d",
                   lag.name or lag.query_id, lag.batch_id, lag.queues, lag.min, lag.avg, lag.max, lag.total)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        pass
