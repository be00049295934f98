"""The Arrow Flight data plane (docs/data-plane.md): DoGet streams one queue range as source-schema
RecordBatches, read through PullMessageProcessor.range_reader (MessageStore.get_queue_range) and
decoded by rmq.record_batch.

A ticket (rmq.v1.FlightReadTicket) is admitted like a PullMessage call: with an ACL, the Flight
call headers carry the request signature, checked in a ServerMiddleware before the ticket is read
(RequestAuthenticator.admit_metadata: target, window, signature, nonce), then the ticket's digest,
the caller's address and the PullMessage permission on the ticket's topic and group
(admit_request); then PullMessageProcessor.parse validates it and answers the same refusals.
TLS and mutual TLS use the gRPC port's certificates.

Bounds: at most max_flight_streams streams at once (max_flight_streams_per_account per access key,
per client IP without an ACL). A stream builds its next batch only when the previous one was
handed to the transport (Flight pulls the generator), and the record bytes of the batch it holds
are granted by the broker's PullResponseBudget (the pull answers' budget, per connection and in
all) until then: a client that stops reading holds one batch, bounded by the pull limits.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
import numpy as np
import pyarrow as pa
import pyarrow.flight as flight
from google.protobuf.message import DecodeError

from rmq import flight as flight_contract
from rmq.broker_server.errors import BrokerError, EdgeError, illegal_argument
from rmq.broker_server.long_polling.fair_shares import FairShares, ShareExceeded, adjust_count
from rmq.broker_server.processors.pull_message_processor import PullMessageProcessor, PullQuery, pack_messages
from rmq.broker_server.processors.pull_response_budget import PullHolder, PullResponseBudget
from rmq.broker_server.security.refusal_log import RefusalLog
from rmq.broker_server.security.request_auth import Admission, CallRefused, RequestAuthenticator, peer_address
from rmq.broker_server.security.tls import ServerTls
from rmq.record_batch import COLUMNS, column_problem, decode_columns, decode_records, parts_of, schema_of
from rmq.record_columns import RecordParts
from rmq.statuses import GetMessageStatus
from rmq.store.results import GetMessageResult
from rmq.v1 import rmq_pb2

T = TypeVar("T")
MIDDLEWARE_KEY = "rmq-auth"
CANCEL_CHECK_S = 0.05   # how often a stream waiting for the event loop looks whether it was cancelled
_NOT_IN_A_TICKET = rmq_pb2.FLAG_SUSPEND | rmq_pb2.FLAG_COMMIT_OFFSET
# a stream goes on after these reads; any other status ends it (the client decides what it means)
_READ_ON = frozenset({GetMessageStatus.FOUND, GetMessageStatus.NO_MATCHED_MESSAGE,
                      GetMessageStatus.MESSAGE_WAS_REMOVING})


@functools.cache
def _no_rows(columns: tuple[str, ...]) -> pa.RecordBatch:
    """A batch of `columns` without rows, built from typed empty columns: from_pylist / pa.array would
    import pandas into the broker (~200 more memory maps and ~40 MiB,
    tests/broker_server/test_broker_imports.py)."""
    schema = schema_of(columns)
    return pa.RecordBatch.from_arrays([pa.nulls(0, column.type) for column in schema], schema=schema)


@dataclass(frozen=True)
class FlightRead:
    """An admitted, validated ticket: `query.offset` up to `end_offset`, within the totals."""

    query: PullQuery
    end_offset: int
    max_rows: int | None
    max_bytes: int | None
    packed: bool   # the records in each batch's metadata, batches without rows (rmq.flight)
    columns: tuple[str, ...] = COLUMNS   # of the batches, in this order

    @property
    def schema(self) -> pa.Schema:
        return schema_of(self.columns)

    @property
    def parts(self) -> RecordParts | None:
        """What of the records the batches are built from, gathered column-wise by the store (None:
        the records as stored, for the packed batches' metadata)."""
        return None if self.packed else parts_of(self.columns)


class _Admitted(flight.ServerMiddleware):
    def __init__(self, admission: Admission) -> None:
        self.admission = admission


class SignedCallMiddlewareFactory(flight.ServerMiddlewareFactory):
    """RequestAuthenticator.admit_metadata on the call headers, before the ticket is read."""

    def __init__(self, authenticator: RequestAuthenticator, refusals: RefusalLog) -> None:
        self.authenticator = authenticator
        self.refusals = refusals

    def start_call(self, info: Any, headers: dict[str, list[Any]]) -> _Admitted:
        metadata = {key: _text(values[0]) for key, values in headers.items() if values}
        try:
            return _Admitted(self.authenticator.admit_metadata(flight_contract.DO_GET_METHOD, metadata))
        except CallRefused as refusal:
            self.refusals.record(flight_contract.DO_GET_METHOD, "flight", refusal.code.name, refusal.message)
            raise flight.FlightUnauthenticatedError(refusal.message) from None


@dataclass(eq=False)
class StreamSlot:
    """One stream's place among the streams served; `displaced` once an account holding fewer
    streams took it (the stream ends before its next read)."""

    account: str
    peer: str   # the client's connection (ServerCallContext.peer)
    displaced: bool = False
    progress: float = field(default_factory=time.monotonic)   # when its client last took a batch


class FlightStreamSlots:
    """Streams served at once, in all and per account (thread-safe: Flight runs on its own threads).

    The total is shared fairly (long_polling.fair_shares): when all max_streams are taken, an
    account holding fewer streams than the account holding most takes the place of that account's
    oldest stream, which ends at its next batch (its client reads on with a new ticket from where
    it ended); anyone else is refused. A displaced stream still counts in its account's
    max_per_account until it ends, so an account never runs more than that many."""

    def __init__(self, max_streams: int, max_per_account: int) -> None:
        self.max_streams = max_streams
        self.max_per_account = max_per_account
        self._shares: FairShares[StreamSlot] = FairShares(max_streams)
        self._running: dict[str, int] = {}   # each account's streams, displaced ones included
        self._live: set[StreamSlot] = set()   # displaced ones included
        self._lock = threading.Lock()

    @property
    def open(self) -> int:
        """Slots taken (a displaced stream that has not ended yet holds none)."""
        with self._lock:
            return self._shares.count()

    def streaming(self) -> dict[str, float]:
        """The connections with streams, each with when its client last took a batch of one
        (time.monotonic): FlightConnectionGuard closes a connection idle that long."""
        progress: dict[str, float] = {}
        with self._lock:
            for slot in self._live:
                progress[slot.peer] = max(progress.get(slot.peer, slot.progress), slot.progress)
        return progress

    def acquire(self, account: str, peer: str) -> StreamSlot:
        with self._lock:
            mine = self._running.get(account, 0)
            if mine >= self.max_per_account:
                raise BrokerError(rmq_pb2.LIMIT_EXCEEDED,
                                   f"this account already reads {mine} Flight streams "
                                   "(max_flight_streams_per_account): finish one, or read again later")
            slot = StreamSlot(account, peer)
            try:
                displaced = self._shares.admit(account, slot)
            except ShareExceeded:
                raise BrokerError(rmq_pb2.LIMIT_EXCEEDED, f"this broker already serves {self.max_streams} "
                                   "Flight streams (max_flight_streams), none of an account holding "
                                   "more than this one: read again later") from None
            if displaced is not None:
                displaced.displaced = True
            adjust_count(self._running, account, 1)
            self._live.add(slot)
            return slot

    def release(self, slot: StreamSlot) -> None:
        with self._lock:
            self._shares.remove(slot.account, slot)
            adjust_count(self._running, slot.account, -1)
            self._live.discard(slot)


class FlightReadService(flight.FlightServerBase):
    def __init__(self, listen: str, broker_name: str, pull: PullMessageProcessor,
                 budget: PullResponseBudget, slots: FlightStreamSlots, loop: asyncio.AbstractEventLoop,
                 tls: ServerTls | None = None, authenticator: RequestAuthenticator | None = None,
                 refusals: RefusalLog | None = None) -> None:
        """Binds `listen` (HOST:PORT, port 0: ephemeral) and serves at once; `loop` runs `budget`."""
        refusals = refusals or RefusalLog()
        middleware = ({MIDDLEWARE_KEY: SignedCallMiddlewareFactory(authenticator, refusals)}
                      if authenticator is not None else {})
        options: dict[str, Any] = {}
        if tls is not None:
            cert, key, client_ca = tls.pem_files()
            options = {"tls_certificates": [flight.CertKeyPair(cert, key)],
                       "verify_client": client_ca is not None, "root_certificates": client_ca}
        super().__init__(flight_contract.location(listen, tls is not None), middleware=middleware, **options)
        self.broker_name = broker_name
        self.pull = pull
        self.budget = budget
        self.slots = slots
        self.loop = loop
        self.authenticator = authenticator
        self.refusals = refusals

    def do_get(self, context: flight.ServerCallContext, ticket: flight.Ticket) -> flight.FlightDataStream:
        try:
            request = _parse_ticket(ticket.ticket)
            account = self._admit(context, request)
            read = self._validate(request)
        except BrokerError as error:
            raise _refused(error) from None
        return flight.GeneratorStream(read.schema, self._stream(read, account, context))

    def _admit(self, context: flight.ServerCallContext, request: rmq_pb2.FlightReadTicket) -> str:
        """The account the stream counts against: the access key, or the caller's IP without an ACL."""
        if self.authenticator is None:
            return peer_address(context.peer())
        admitted: _Admitted = context.get_middleware(MIDDLEWARE_KEY)
        try:
            self.authenticator.admit_request(admitted.admission, flight_contract.DO_GET_METHOD, request,
                                             context.peer())
        except CallRefused as refusal:
            self.refusals.record(flight_contract.DO_GET_METHOD, context.peer(), refusal.code.name,
                                 refusal.message)
            raise _flight_refusal(refusal) from None
        return admitted.admission.access_key

    def _validate(self, request: rmq_pb2.FlightReadTicket) -> FlightRead:
        """PullMessageProcessor.parse's checks and refusals, and the range's own."""
        if request.pull.sys_flag & _NOT_IN_A_TICKET:
            raise illegal_argument(f"pull.sys_flag {request.pull.sys_flag}: a Flight read never suspends "
                                   "nor commits an offset")
        query = self.pull.parse(request.pull)
        if request.end_offset <= query.offset:
            raise illegal_argument(f"end_offset {request.end_offset} must be above the start offset "
                                   f"{query.offset}")
        if request.max_rows < 0 or request.max_bytes < 0:
            raise illegal_argument("max_rows and max_bytes must not be negative")
        columns = tuple(request.columns) or COLUMNS
        problem = column_problem(columns)
        if problem is not None:
            raise illegal_argument(f"columns: {problem}")
        return FlightRead(query, request.end_offset, request.max_rows or None, request.max_bytes or None,
                          request.packed, columns)

    def _stream(self, read: FlightRead, account: str, context: flight.ServerCallContext
                ) -> Iterator[tuple[pa.RecordBatch, pa.Buffer]]:
        """One batch per store read, each holding its record bytes until the next is asked for.
        The stream's slot is taken when Flight asks for its first batch (a stream never started
        holds nothing) and given back when it ends; a stream its client cancelled stops before
        its next read, or while it waits for one."""
        try:
            slot = self.slots.acquire(account, context.peer())
        except BrokerError as error:
            raise _refused(error) from None
        holder, held = PullHolder(account, f"flight {context.peer()}"), 0
        try:
            query, offset, rows, size = read.query, read.query.offset, 0, 0
            while not context.is_cancelled() and not slot.displaced:
                max_rows = query.max_messages if read.max_rows is None else min(query.max_messages,
                                                                                 read.max_rows - rows)
                wanted = query.max_bytes if read.max_bytes is None else min(query.max_bytes,
                                                                            read.max_bytes - size)
                self.budget.give_back(holder, held)
                held = 0
                held = granted = self._reserve(holder, wanted, context)
                result = self._read(read, offset, max_rows, granted, holder, context)
                held = result.byte_count
                self.budget.give_back(holder, granted - held)
                if result.message_count:
                    self.pull.stats.record_get(query.topic, result.message_count, held, query.group, account)
                yield self._batch(read, result)
                slot.progress = time.monotonic()
                rows, size = rows + result.message_count, size + held
                if result.status not in _READ_ON or result.next_begin_offset <= offset:
                    return   # the client reads what the status means and where to go on
                offset = result.next_begin_offset
                if (offset >= read.end_offset or _reached(rows, read.max_rows)
                        or _reached(size, read.max_bytes)):
                    return
        except _Cancelled:   # before BrokerError: a cancelled stream is not refused, it ends
            return
        except BrokerError as error:   # the budget had nothing left for a full second
            raise _refused(error) from None
        finally:
            self.budget.give_back(holder, held)
            self.slots.release(slot)

    def _read(self, read: FlightRead, offset: int, max_rows: int, max_bytes: int, holder: PullHolder,
              context: flight.ServerCallContext) -> GetMessageResult:
        """One store read of the range; an SQL92 one is one slice of filter work, run on the
        broker's FilterExecutor in the stream's account's turn (docs/filtering-and-bounds.md)."""
        query = read.query
        store_read = self.pull.range_reader(query, offset, read.end_offset, max_rows, max_bytes,
                                            parts=read.parts)
        if query.record_filter is None:
            return store_read()
        return self._on_loop(self.pull.filters.run(holder.account, store_read), context)

    def _batch(self, read: FlightRead, result: GetMessageResult) -> tuple[pa.RecordBatch, pa.Buffer]:
        answer = self.pull.progress(read.query, result)
        if read.packed:   # PullMessage's whole answer, records as stored
            pack_messages(answer.messages, result)
        progress = pa.py_buffer(answer.SerializeToString())
        if not result.message_count or read.packed:
            return _no_rows(read.columns), progress
        if result.columns is not None:
            return decode_columns(result.columns, self.broker_name, read.columns), progress
        records = np.frombuffer(result.buffer, dtype=np.uint8)
        sizes = result.sizes.astype(np.int64)
        return decode_records(records, sizes, self.broker_name, read.columns), progress

    def _reserve(self, holder: PullHolder, wanted: int, context: flight.ServerCallContext) -> int:
        """The bytes granted for the next read: at once when the budget has them, else waited for
        on the event loop (PullResponseBudget.reserve)."""
        granted = self.budget.try_reserve(holder, wanted)
        if granted is not None:
            return granted
        return self._on_loop(self.budget.reserve(holder, wanted), context)

    def _on_loop(self, work: Coroutine[Any, Any, T], context: flight.ServerCallContext) -> T:
        """`work`'s result, run on the broker's event loop; cancelled (and _Cancelled raised) when
        the stream's client cancels while it waits."""
        future = asyncio.run_coroutine_threadsafe(work, self.loop)
        while True:
            try:
                return future.result(CANCEL_CHECK_S)
            except concurrent.futures.TimeoutError:
                if context.is_cancelled():
                    future.cancel()
                    raise _Cancelled(grpc.StatusCode.CANCELLED, "the stream's client cancelled it") from None


class _Cancelled(EdgeError):
    """The stream's client cancelled it while it waited for the event loop."""


def _parse_ticket(ticket: bytes) -> rmq_pb2.FlightReadTicket:
    try:
        return rmq_pb2.FlightReadTicket.FromString(ticket)
    except DecodeError:
        raise illegal_argument("the Flight ticket is not an rmq.v1.FlightReadTicket") from None


def _flight_refusal(refusal: CallRefused) -> flight.FlightError:
    """The gRPC port's status as Flight's: UNAUTHENTICATED, or PERMISSION_DENIED (unauthorized)."""
    if refusal.code is grpc.StatusCode.PERMISSION_DENIED:
        return flight.FlightUnauthorizedError(refusal.message)
    return flight.FlightUnauthenticatedError(refusal.message)


def _refused(error: BrokerError) -> flight.FlightServerError:
    """What PullMessage would answer, as a Flight error: the Status in extra_info (rmq.flight)."""
    return flight.FlightServerError(f"{rmq_pb2.Code.Name(error.code)}: {error.message}",
                                    extra_info=error.status().SerializeToString())


def _reached(count: int, limit: int | None) -> bool:
    return limit is not None and count >= limit


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)

