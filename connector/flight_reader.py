"""Bulk reads through a broker's Arrow Flight data plane (docs/data-plane.md).

One DoGet per ticket: a signed read of one queue range whose stream is source-schema
RecordBatches, each with the PullResult of the store read that made it (its app metadata), so a
reader handles statuses, offset corrections and lost offsets exactly as for PullMessage answers.
Flight clients are kept per address; the ticket is signed like an RPC (rmq.request_signing) for
the broker named by the queue, and TLS / mutual TLS follow the RmqClient's settings. A `packed`
read gets the stored records in each chunk's PullResult instead of rows, as a pull would.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.flight as flight

from rmq import flight as flight_contract
from rmq import request_signing
from rmq.connector.client import PullResult, RmqClient, pull_result
from rmq.connector.errors import RmqError, RmqRefused, RmqUnavailable
from rmq.message_queue import MessageQueue
from rmq.subscription import MessageSelector
from rmq.v1 import rmq_pb2

# A ticket covers at most this many store reads, so its deadline (this many per-read timeouts)
# finds a broker that stopped answering.
READS_PER_TICKET = 16
_UNAVAILABLE = (flight.FlightUnavailableError, flight.FlightTimedOutError, flight.FlightCancelledError)


@dataclass(frozen=True)
class FlightChunk:
    """One store read: its rows (source schema; none for a packed read) and its outcome (with the
    records for a packed read)."""

    batch: pa.RecordBatch
    result: PullResult


class FlightReader:
    """Reads queue ranges through the Flight data plane of the brokers `client` routes to."""

    def __init__(self, client: RmqClient) -> None:
        self._client = client
        self._flight_clients: dict[str, flight.FlightClient] = {}
        self._unreachable: set[str] = set()   # brokers whose advertised data plane did not answer
        self._lock = threading.Lock()

    def __enter__(self) -> FlightReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            clients, self._flight_clients = self._flight_clients, {}
        for client in clients.values():
            client.close()

    def available(self, mq: MessageQueue) -> bool:
        """Whether the member a pull of `mq` would go to serves Flight."""
        member = self._client.read_member(mq)
        return member is not None and bool(member.flight_address)

    def read(self, mq: MessageQueue, start: int, end: int, *, group: str, batch_rows: int,
             batch_bytes: int = 0, sub_expression: str | MessageSelector = "*",
             timeout: float | None = None, reads: int = READS_PER_TICKET, packed: bool = False,
             columns: Sequence[str] = ()) -> Generator[FlightChunk, None, None]:
        """The store reads of one ticket from `start` towards `end` (at most `reads` of
        `batch_rows`, READS_PER_TICKET at most), as batches of the source schema's `columns` (all
        when empty); the last one's result says where to go on.
        RmqUnavailable when the broker cannot be reached or serves no Flight, RmqError for a
        refused ticket."""
        reads = min(reads, READS_PER_TICKET)
        member = self._client.read_member(mq, refresh=mq.broker_name in self._unreachable)
        self._unreachable.discard(mq.broker_name)
        if member is None or not member.flight_address:
            raise RmqUnavailable(f"broker {mq.broker_name} advertises no Flight data plane",
                                 broker=mq.broker_name, queue=mq)
        address = member.flight_address
        label = f"{mq.broker_name} Flight data plane at {address}"
        ticket = self._client.flight_ticket(mq, start, end, group=group,
                                            max_rows=reads * batch_rows, batch_rows=batch_rows,
                                            batch_bytes=batch_bytes, sub_expression=sub_expression,
                                            packed=packed, columns=columns)
        per_read = timeout or self._client.timeout
        options = flight.FlightCallOptions(timeout=reads * per_read,
                                           headers=self._signing_headers(mq, member.broker_id, ticket))
        try:
            reader = self._flight_client(address).do_get(flight.Ticket(ticket.SerializeToString()), options)
            while True:
                try:
                    batch, metadata = reader.read_chunk()
                except StopIteration:
                    return
                progress = rmq_pb2.PullMessageResponse.FromString(metadata.to_pybytes())
                try:
                    yield FlightChunk(batch, pull_result(progress))
                except GeneratorExit:   # the caller stopped reading: end the stream on the broker too
                    reader.cancel()
                    raise
        except flight.FlightError as error:
            failure = _flight_error(error, label, mq)
        except OSError as error:   # a stream cut by the broker going away (pyarrow's ArrowIOError)
            failure = RmqUnavailable(f"Flight DoGet failed: {error}", broker=label, queue=mq)
        if isinstance(failure, RmqUnavailable):
            self._client.mark_down(member)   # the next ticket goes to another member, if one is up
            self._unreachable.add(mq.broker_name)
        raise failure

    def _signing_headers(self, mq: MessageQueue, broker_id: int, ticket: rmq_pb2.FlightReadTicket
                         ) -> list[tuple[bytes, bytes]]:
        """Signed for the member read from: each member of a group checks its own server id."""
        credentials = self._client.credentials
        if credentials is None:
            return []
        signed = request_signing.sign(credentials.access_key, credentials.secret_key,
                                      request_signing.broker_server_id(mq.broker_name, broker_id),
                                      flight_contract.DO_GET_METHOD, ticket)
        return [(key.encode(), value.encode()) for key, value in signed.as_metadata()]

    def _flight_client(self, address: str) -> flight.FlightClient:
        with self._lock:
            client = self._flight_clients.get(address)
            if client is None:
                client = self._flight_clients[address] = self._open(address)
            return client

    def _open(self, address: str) -> flight.FlightClient:
        tls = self._client.tls
        if tls is None:
            return flight.FlightClient(flight_contract.location(address, False))
        cert, key = _pem(tls.cert_file), _pem(tls.key_file)
        return flight.FlightClient(flight_contract.location(address, True), tls_root_certs=_pem(tls.ca_file),
                                   cert_chain=cert, private_key=key)


def _pem(path: object) -> bytes | None:
    return None if path is None else open(str(path), "rb").read()   # readable: RmqClient checked it


def _flight_error(error: flight.FlightError, label: str, mq: MessageQueue) -> RmqError:
    """RmqError as PullMessage's: the Status the broker refused the ticket with, else the
    Flight status (transport failures: RmqUnavailable, to retry)."""
    text = str(error).split(". Detail:")[0]
    status = flight_contract.parse_refusal(error.extra_info)
    if status is not None:
        return RmqRefused(status.code, status.message, broker=label, queue=mq)
    if isinstance(error, _UNAVAILABLE):
        return RmqUnavailable(f"Flight DoGet failed: {text}", broker=label, queue=mq)
    denied = isinstance(error, flight.FlightUnauthorizedError)
    code = rmq_pb2.NO_PERMISSION if denied else rmq_pb2.SYSTEM_ERROR
    kind = type(error).__name__.removeprefix("Flight").removesuffix("Error").upper()
    return RmqRefused(code, f"Flight DoGet failed: {kind}: {text}", broker=label, queue=mq)
