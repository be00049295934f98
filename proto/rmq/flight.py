"""The Arrow Flight data plane's wire contract (docs/data-plane.md), shared by the broker and
the client like `rmq.request_signing`.

A DoGet ticket is a serialized `rmq.v1.FlightReadTicket`, signed as a call of DO_GET_METHOD (the
x-rmq-* signing headers travel as Flight call headers). The stream's batches have the source
schema (rmq.record_batch.SCHEMA); each carries as app metadata the serialized PullMessageResponse
(without messages) of the store read that produced it. A `packed` ticket's batches have no rows
and their metadata carries the messages (PullMessage's whole answer, the records as stored). A
refused ticket fails the call with a Flight error whose extra_info is the serialized
`rmq.v1.Status` PullMessage would have answered.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from rmq.v1 import rmq_pb2

DO_GET_METHOD = "/rmq.v1.Flight/DoGet"


def location(address: str, tls: bool) -> str:
    """The Flight location of a HOST:PORT data plane address."""
    return f"grpc+tls://{address}" if tls else f"grpc://{address}"


def parse_refusal(extra_info: bytes | None) -> rmq_pb2.Status | None:
    """The Status of a refused ticket, None when the error carries none (transport failures)."""
    if not extra_info:
        return None
    try:
        status = rmq_pb2.Status.FromString(extra_info)
    except DecodeError:
        return None
    return status if status.code != rmq_pb2.OK else None
