"""A PullConsumer's backlog read through the broker's Arrow Flight data plane (docs/data-plane.md,
"The PullConsumer").

A queue whose backlog (the broker's max offset, as the last read of it answered, minus the next
offset to read) holds at least FLIGHT_BACKLOG_PULLS pulls is read by one packed Flight ticket
instead of pull after pull: the ticket starts at the next offset, has no end but the queue's own,
and carries at most the rows the queue's cache still has room for (pull_threshold_for_queue), one
store read of FLIGHT_BATCH_ROWS (at least `pull_batch_size`) per batch; poll() still hands them out
`pull_batch_size` at a time. A packed batch's metadata is the PullMessageResponse a
PullMessage at that offset would have answered, records included, so the consumer takes each one
exactly as a pull's answer (decoding, tag re-check, offset corrections, removed entries). When the
stream ends the consumer reads the queue on as before: long-polling PullMessage at the tail, or
the next ticket while a backlog is left.

Option `transport` (transport.Transport): AUTO reads a backlog through Flight where the route
advertises it; a Flight read that finds the data plane unreachable sends that broker's queues back
to PullMessage for FALLBACK_S. FLIGHT reads every range that exists through Flight (a broker
without it stops poll with RmqReadError); the tail is waited for by long polling either way (a
Flight read never waits). GRPC never uses Flight.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from rmq.connector.client import MessageQueue, PullResult, RmqClient
from rmq.connector.errors import ConfigError, RmqError, RmqUnavailable
from rmq.connector.rebalance_impl import PullRequest
from rmq.connector.transport import Transport, reads_through_flight
from rmq.subscription import MessageSelector

if TYPE_CHECKING:
    from rmq.connector.flight_reader import FlightReader

FLIGHT_BACKLOG_PULLS = 4    # a backlog of this many pulls or more is read through Flight (AUTO)
FLIGHT_BATCH_ROWS = 256     # rows of one store read of a ticket (poll still hands out pull_batch_size)
FLIGHT_READERS = 4          # tickets read at once (the broker allows 16 streams per account)
FALLBACK_S = 30.0           # AUTO: pulls only, for this long after a broker's data plane failed
OPEN_END = (1 << 63) - 1    # a ticket reads up to the queue's end (its rows are bounded instead)

Take = Callable[[PullRequest, PullResult], None]
Done = Callable[[PullRequest, RmqError | None], None]


class FlightPullService:
    """Decides per pull whether a queue's next read goes through Flight, and reads the tickets."""

    def __init__(self, client: RmqClient, group: str, transport: Transport, pull_batch_size: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.transport = transport
        self._group = group
        self._batch = pull_batch_size
        self._read_rows = max(pull_batch_size, FLIGHT_BATCH_ROWS)
        self._clock = clock
        self._reader = _flight_reader(client, transport)
        self._executor: ThreadPoolExecutor | None = None
        self._max_offsets: dict[MessageQueue, int] = {}     # as the last read of the queue answered
        self._pulls_until: dict[str, float] = {}             # broker -> clock: its data plane failed
        self._lock = threading.Lock()
        self._stopped = False

    def saw(self, mq: MessageQueue, result: PullResult) -> None:
        """The broker's max offset of `mq` as a read of it answered."""
        self._max_offsets[mq] = result.max_offset

    def wants(self, mq: MessageQueue, next_offset: int) -> bool:
        """Whether the read of `mq` at `next_offset` goes through Flight. RmqReadError when
        transport is FLIGHT and the broker serves none; RmqUnavailable when the route cannot be
        had (the caller retries as for a pull)."""
        reader = self._reader
        if reader is None:
            return False
        backlog = self._max_offsets.get(mq, -1) - next_offset
        if self.transport is Transport.AUTO:
            if backlog < FLIGHT_BACKLOG_PULLS * self._batch:
                return False
            if self._pulls_until.get(mq.broker_name, 0.0) > self._clock():
                return False
        if not reads_through_flight(self.transport, lambda: reader.available(mq), mq.broker_name):
            return False
        # FLIGHT: the first read, or a range that exists (the tail is long-polled either way)
        return self.transport is Transport.AUTO or mq not in self._max_offsets or backlog > 0

    def read(self, request: PullRequest, selector: str | MessageSelector, room: int, take: Take,
             done: Done) -> None:
        """Read one ticket of `request`'s queue from its next offset on a reader thread: at most
        `room` rows; `take(request, result)` for each store read, then `done(request, error)`."""
        reads = max(1, room // self._read_rows)   # FlightReader caps it at READS_PER_TICKET
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(FLIGHT_READERS, thread_name_prefix="rmq-flight-pull")
            self._executor.submit(self._read, request, selector, reads, take, done)

    def _read(self, request: PullRequest, selector: str | MessageSelector, reads: int, take: Take,
              done: Done) -> None:
        mq, pq = request.message_queue, request.process_queue
        assert self._reader is not None   # wants() said Flight
        error: RmqError | None = None
        try:
            chunks = self._reader.read(mq, request.next_offset, OPEN_END, group=self._group,
                                       batch_rows=self._read_rows, sub_expression=selector, reads=reads,
                                       packed=True)
            for chunk in chunks:
                if pq.dropped or self._stopped:
                    chunks.close()   # cancels the stream on the broker
                    return
                self.saw(mq, chunk.result)
                take(request, chunk.result)
        except RmqError as failure:
            error = failure
            if isinstance(failure, RmqUnavailable) and self.transport is Transport.AUTO:
                self._pulls_until[mq.broker_name] = self._clock() + FALLBACK_S
        done(request, error)

    def shutdown(self) -> None:
        """Stop reading (streams in flight end at their next batch) and close the Flight clients."""
        self._stopped = True
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)
        if self._reader is not None:
            self._reader.close()


def _flight_reader(client: RmqClient, transport: Transport) -> FlightReader | None:
    """The Flight client, None for GRPC, or for AUTO without pyarrow (an optional extra: the SDK
    then reads by PullMessage only). FLIGHT without pyarrow is a ConfigError."""
    if transport is Transport.GRPC:
        return None
    try:
        from rmq.connector.flight_reader import FlightReader
    except ModuleNotFoundError as missing:
        if transport is Transport.FLIGHT:
            raise ConfigError(f"transport=flight needs pyarrow, and {missing.name} is not installed: pip "
                              "install 'rmq[spark]' (or pyarrow), or use transport auto or grpc") from None
        return None
    return FlightReader(client)
