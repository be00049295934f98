"""Status words both sides share (RocketMQ PutMessageStatus, GetMessageStatus, PullStatus,
SendStatus).

GetMessageStatus (the store's answer to a read) and PullStatus (what a pull means to the
client) travel in PullMessageResponse: their values are the wire numbers of rmq.v1's
GetMessageStatus (GMS_<name>) and PullStatus, so `int(member)` goes on the wire and
`Enum(number)` comes off it. PutMessageStatus stays on the broker, which answers it as a
`Code` (send_message_processor); SendStatus is how the client reads the Codes of a stored send."""

from __future__ import annotations

import enum


class PutMessageStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    MESSAGE_SIZE_EXCEEDED = "MESSAGE_SIZE_EXCEEDED"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"
    # SYNC_MASTER (spec store §2 note: upstream): stored on the master, no slave holds it in time /
    # none in sync
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


class GetMessageStatus(enum.IntEnum):
    """The store's outcome of a read; value = rmq.v1 GetMessageStatus GMS_<name>."""

    FOUND = 0
    NO_MATCHED_MESSAGE = 1
    MESSAGE_WAS_REMOVING = 2
    OFFSET_FOUND_NULL = 3
    OFFSET_OVERFLOW_BADLY = 4
    OFFSET_OVERFLOW_ONE = 5
    OFFSET_TOO_SMALL = 6
    NO_MATCHED_LOGIC_QUEUE = 7
    NO_MESSAGE_IN_QUEUE = 8


class PullStatus(enum.IntEnum):
    """The client's reading of a pull (spec consumption-longpolling-offsets §7.2); value =
    rmq.v1 PullStatus."""

    FOUND = 0
    NO_NEW_MSG = 1
    NO_MATCHED_MSG = 2
    OFFSET_ILLEGAL = 3


class SendStatus(enum.IntEnum):
    """RocketMQ SendStatus: a send that was stored, and whether it is durable as asked; value =
    the rmq.v1 Code the broker answered (so a SendStatus still compares equal to that code)."""

    SEND_OK = 0               # Code OK
    FLUSH_DISK_TIMEOUT = 8    # Code FLUSH_DISK_TIMEOUT
    FLUSH_SLAVE_TIMEOUT = 18  # Code FLUSH_SLAVE_TIMEOUT: stored on the master only (SYNC_MASTER)
    SLAVE_NOT_AVAILABLE = 19  # Code SLAVE_NOT_AVAILABLE: stored on the master only (SYNC_MASTER)
