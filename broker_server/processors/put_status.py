"""A store's PutMessageStatus as the refusal (BrokerError) or the stored-but answer a sender
gets: every path that puts into the store (sends, send-backs, scheduled and timer deliveries,
transaction commits) answers alike."""

from __future__ import annotations

from typing import Any

from rmq.broker_server.errors import BrokerError
from rmq.store import PutMessageStatus
from rmq.v1 import rmq_pb2

# Every PutMessageStatus but PUT_OK -> the Code and reason the producer gets.
_PUT_STATUS = {
    PutMessageStatus.FLUSH_DISK_TIMEOUT: (
        rmq_pb2.FLUSH_DISK_TIMEOUT,
        "the batch was written but not flushed to disk in time; it is not acknowledged",
    ),
    PutMessageStatus.MESSAGE_ILLEGAL: (rmq_pb2.MESSAGE_ILLEGAL, "the store refused a message as illegal"),
    PutMessageStatus.PROPERTIES_SIZE_EXCEEDED: (
        rmq_pb2.PROPERTIES_SIZE_EXCEEDED,
        "the store refused a message's properties as too large",
    ),
    PutMessageStatus.MESSAGE_SIZE_EXCEEDED: (rmq_pb2.MESSAGE_SIZE_EXCEEDED,
                                             "the store refused a message as too large"),
    PutMessageStatus.SERVICE_NOT_AVAILABLE: (
        rmq_pb2.SERVICE_NOT_AVAILABLE,
        "the store is not writeable (shutting down, disk full or read-only)",
    ),
    PutMessageStatus.UNKNOWN_ERROR: (rmq_pb2.SYSTEM_ERROR, "the store failed"),
}

# SYNC_MASTER outcomes of a batch that IS stored (and flushed) on the master, answered with the
# message ids like OK, under their own Code: "stored on the master only" (docs/replication.md).
STORED_ON_MASTER_ONLY = {
    PutMessageStatus.FLUSH_SLAVE_TIMEOUT: (
        rmq_pb2.FLUSH_SLAVE_TIMEOUT, "stored on the master; no slave confirmed holding it in time"),
    PutMessageStatus.SLAVE_NOT_AVAILABLE: (
        rmq_pb2.SLAVE_NOT_AVAILABLE, "stored on the master; no slave is connected and in sync"),
}


def check_put_status(status: PutMessageStatus, detail: str = "") -> None:
    """Raise for a store status other than PUT_OK (a batch is accepted or refused whole); the
    STORED_ON_MASTER_ONLY statuses pass: the batch is stored."""
    if status is PutMessageStatus.PUT_OK or status in STORED_ON_MASTER_ONLY:
        return
    code, reason = _PUT_STATUS[status]
    raise BrokerError(code, f"{reason} ({detail}{status.name})")


def check_put_results(results: list[Any]) -> None:
    """Raise for the first result that is not PUT_OK."""
    for index, result in enumerate(results):
        check_put_status(result.status, f"message {index}: ")
