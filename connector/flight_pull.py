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

The first reads of the queues a rebalance adds (`pack`): their max offsets are asked once per topic
(GetTopicOffsets), and the queues whose backlog is smaller than FLIGHT_BACKLOG_PULLS pulls but not
empty are read by tickets of several ranges (rmq.flight: `more`), up to MAX_TICKET_RANGES queues
of one broker and topic per ticket, each range up to that max offset and at most its cache's room; each
queue reads on as above when its range ends. A consumer of many queues with a few messages each
then starts with a few streams instead of one pull per queue (docs/data-plane.md).

Option `transport` (transport.Transport): AUTO reads a backlog through Flight where the route
advertises it; a Flight read that finds the data plane unreachable sends that broker's queues back
to PullMessage for FALLBACK_S. FLIGHT reads every range that exists through Flight (a broker
without it stops poll with RmqReadError); the tail is waited for by long polling either way (a
Flight read never waits). GRPC never uses Flight.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rmq.connector.client import MessageQueue, PullResult, RmqClient
from rmq.connector.errors import ConfigError, RmqError, RmqReadError, RmqUnavailable
from rmq.connector.rebalance_impl import PullRequest
from rmq.connector.transport import Transport
from rmq.flight import MAX_TICKET_RANGES
from rmq.subscription import MessageSelector

if TYPE_CHECKING:
    from rmq.connector.flight_reader import FlightChunk, FlightReader

FLIGHT_BACKLOG_PULLS = 4    # a backlog of this many pulls or more is read through Flight (AUTO)
FLIGHT_BATCH_ROWS = 256     # rows of one store read of a ticket (poll still hands out pull_batch_size)
FLIGHT_READERS = 4          # tickets read at once (the broker allows 16 streams per account)
FALLBACK_S = 30.0           # AUTO: pulls only, for this long after a broker's data plane failed
OPEN_END = (1 << 63) - 1    # a ticket reads up to the queue's end (its rows are bounded instead)

Take = Callable[[PullRequest, PullResult], None]
Done = Callable[[PullRequest, RmqError | None], None]
Room = Callable[[PullRequest], int]


@dataclass(frozen=True)
class _Range:
    """A queue's range in a ticket of several: from the request's next offset up to `end`, at most `rows`."""

    request: PullRequest
    end: int
    rows: int


class FlightPullService:
    """Decides per pull whether a queue's next read goes through Flight, and reads the tickets."""

    def __init__(self, client: RmqClient, group: str, transport: Transport, pull_batch_size: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.transport = transport
        self._client = client
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
        if self._reader is None:
            return False
        backlog = self._max_offsets.get(mq, -1) - next_offset
        if self.transport is Transport.AUTO:
            return backlog >= FLIGHT_BACKLOG_PULLS * self._batch and self._serves(mq)
        if not self._reader.available(mq):
            raise RmqReadError(f"transport=flight, but broker {mq.broker_name} advertises no Arrow Flight "
                               "data plane (started with --flight-listen off?): use transport auto or grpc")
        return mq not in self._max_offsets or backlog > 0   # the first read, or a range that exists

    def _serves(self, mq: MessageQueue) -> bool:
        """AUTO: whether `mq`'s broker advertises Flight and its data plane did not fail lately."""
        assert self._reader is not None
        return self._pulls_until.get(mq.broker_name, 0.0) <= self._clock() and self._reader.available(mq)

    def pack(self, requests: Sequence[PullRequest], selector: Callable[[str], str | MessageSelector],
             room: Room, take: Callable[[str], Take], done: Done) -> set[int]:
        """Start the first reads of `requests` whose backlog is small but not empty by tickets of
        several ranges (per broker and topic; `selector` and `take` per topic, `room` per queue);
        returns the ids of the requests read so (the others' backlog is large, none, or not known)."""
        if self._reader is None or len(requests) < 2:
            return set()
        small = self._small_backlogs(requests)
        groups: dict[tuple[str, str], list[_Range]] = defaultdict(list)
        for request in small:
            mq = request.message_queue
            groups[mq.broker_name, mq.topic].append(_Range(request, self._max_offsets[mq], room(request)))
        packed: set[int] = set()
        for (_, topic), ranges in groups.items():
            for start in range(0, len(ranges), MAX_TICKET_RANGES):
                ticket = [each for each in ranges[start:start + MAX_TICKET_RANGES] if each.rows > 0]
                if len(ticket) < 2:
                    continue
                packed.update(id(each.request) for each in ticket)
                self._submit(self._read_ranges, ticket, selector(topic), take(topic), done)
        return packed

    def _small_backlogs(self, requests: Sequence[PullRequest]) -> list[PullRequest]:
        """The requests whose backlog (one GetTopicOffsets per topic and its brokers) is under
        FLIGHT_BACKLOG_PULLS pulls and not empty; none when the offsets cannot be had."""
        topics: dict[str, set[str]] = defaultdict(set)
        for request in requests:
            topics[request.message_queue.topic].add(request.message_queue.broker_name)
        try:
            for topic, brokers in topics.items():
                for mq, offsets in self._client.topic_offsets(topic, unreachable={}, brokers=brokers).items():
                    self._max_offsets[mq] = offsets.max_offset
        except RmqError:
            return []   # the queues' own first reads find out
        small = []
        for request in requests:
            backlog = self._max_offsets.get(request.message_queue, -1) - request.next_offset
            if 0 < backlog < FLIGHT_BACKLOG_PULLS * self._batch and self._packable(request.message_queue):
                small.append(request)
        return small

    def _packable(self, mq: MessageQueue) -> bool:
        if self.transport is Transport.AUTO:
            return self._serves(mq)
        assert self._reader is not None
        return self._reader.available(mq)   # FLIGHT without a data plane: the queue's own read says so

    def _read_ranges(self, ticket: list[_Range], selector: str | MessageSelector, take: Take,
                     done: Done) -> None:
        """One ticket of several queues' ranges, each up to the max offset GetTopicOffsets answered
        and at most `rows`; each queue's `done` as soon as its range ended."""
        from rmq.connector.flight_reader import QueueRange
        assert self._reader is not None
        requests = [each.request for each in ticket]
        first = ticket[0]
        mq = first.request.message_queue
        ended, error = 0, None
        try:
            chunks = self._reader.read(
                mq, first.request.next_offset, first.end, group=self._group, batch_rows=self._read_rows,
                sub_expression=selector, packed=True, max_rows=first.rows,
                more=[QueueRange(each.request.message_queue, each.request.next_offset, each.end, each.rows)
                      for each in ticket[1:]])
            for chunk in chunks:
                if self._stopped or all(request.process_queue.dropped for request in requests):
                    chunks.close()
                    return
                for request in requests[ended:chunk.range_index]:
                    done(request, None)
                ended = max(ended, chunk.range_index)
                self._take_chunk(requests[ended], chunk, take)
        except RmqError as failure:
            error = failure
            self._failed(mq, failure)
        for request in requests[ended:]:
            done(request, error)

    def _take_chunk(self, request: PullRequest, chunk: FlightChunk, take: Take) -> None:
        if not request.process_queue.dropped:
            self.saw(request.message_queue, chunk.result)
            take(request, chunk.result)

    def _failed(self, mq: MessageQueue, failure: RmqError) -> None:
        if isinstance(failure, RmqUnavailable) and self.transport is Transport.AUTO:
            self._pulls_until[mq.broker_name] = self._clock() + FALLBACK_S

    def read(self, request: PullRequest, selector: str | MessageSelector, room: int, take: Take,
             done: Done) -> None:
        """Read one ticket of `request`'s queue from its next offset on a reader thread: at most
        `room` rows; `take(request, result)` for each store read, then `done(request, error)`."""
        reads = max(1, room // self._read_rows)   # FlightReader caps it at READS_PER_TICKET
        self._submit(self._read, request, selector, reads, take, done)

    def _submit(self, read: Callable[..., None], *args: object) -> None:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(FLIGHT_READERS, thread_name_prefix="rmq-flight-pull")
            self._executor.submit(read, *args)

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
            self._failed(mq, failure)
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
