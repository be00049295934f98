"""Business outcomes of v2 calls: `Status{code, message}` with apache.rocketmq.v2 Codes inside
every response (spec rocketmq-v2-protocol.md §1: the client checks the status, never a gRPC
error). Handlers raise the broker's `BrokerError`, whose rmq.v1 Code is mapped here, or a
`V2Error` carrying a v2 Code of its own."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from rmq.broker_server import errors
from rmq.broker_server.errors import (
    BrokerError,
    EdgeError,
    Handler,
    IllegalInvisibleTime,
    InvalidReceiptHandle,
    NotMaster,
    UnknownTransaction,
)
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)

OK = v2.Status(code=v2.OK, message="OK")

# rmq.v1 Code -> apache.rocketmq.v2 Code
_FROM_RMQ: dict[int, v2.Code] = {
    rmq_pb2.ILLEGAL_ARGUMENT: v2.BAD_REQUEST,
    rmq_pb2.TOPIC_NOT_EXIST: v2.TOPIC_NOT_FOUND,
    rmq_pb2.TOPIC_ILLEGAL: v2.ILLEGAL_TOPIC,
    rmq_pb2.MESSAGE_ILLEGAL: v2.BAD_REQUEST,
    rmq_pb2.MESSAGE_SIZE_EXCEEDED: v2.MESSAGE_BODY_TOO_LARGE,
    rmq_pb2.PROPERTIES_SIZE_EXCEEDED: v2.MESSAGE_PROPERTIES_TOO_LARGE,
    rmq_pb2.FLUSH_DISK_TIMEOUT: v2.MASTER_PERSISTENCE_TIMEOUT,
    rmq_pb2.NO_PERMISSION: v2.FORBIDDEN,
    rmq_pb2.GROUP_ILLEGAL: v2.ILLEGAL_CONSUMER_GROUP,
    rmq_pb2.SUBSCRIPTION_GROUP_NOT_EXIST: v2.CONSUMER_GROUP_NOT_FOUND,
    rmq_pb2.LIMIT_EXCEEDED: v2.TOO_MANY_REQUESTS,   # a bound of the broker's (max_held_pulls, ...)
    rmq_pb2.WHEEL_TIMER_MSG_ILLEGAL: v2.ILLEGAL_DELIVERY_TIME,
    rmq_pb2.WHEEL_TIMER_FLOW_CONTROL: v2.TOO_MANY_REQUESTS,
    rmq_pb2.QUERY_NOT_FOUND: v2.NOT_FOUND,
    rmq_pb2.SUBSCRIPTION_PARSE_FAILED: v2.ILLEGAL_FILTER_EXPRESSION,
    rmq_pb2.FILTER_NOT_SUPPORTED: v2.ILLEGAL_FILTER_EXPRESSION,
}
# BrokerError leaves whose rmq.v1 Code is shared with other refusals -> their own v2 Code
_LEAVES: tuple[tuple[type[BrokerError], v2.Code], ...] = (
    (NotMaster, v2.FORBIDDEN),
    (UnknownTransaction, v2.INVALID_TRANSACTION_ID),
    (InvalidReceiptHandle, v2.INVALID_RECEIPT_HANDLE),
    (IllegalInvisibleTime, v2.ILLEGAL_INVISIBLE_TIME),
)


class V2Error(EdgeError):
    """A refusal only the RocketMQ 5 edge raises, with its apache.rocketmq.v2 Code."""

    def __init__(self, code: v2.Code, message: str) -> None:
        super().__init__(code, message)

    def status(self) -> v2.Status:  # type: ignore[override]
        return v2.Status(code=self.code, message=self.message)


def as_v2_error(error: Exception) -> V2Error:
    """A refusal from rmq's processors (or a bad message) as the v2 status the client gets."""
    if isinstance(error, V2Error):
        return error
    for leaf, code in _LEAVES:
        if isinstance(error, leaf):
            return V2Error(code, error.message)
    if isinstance(error, BrokerError) and not isinstance(error, EdgeError):
        return V2Error(_FROM_RMQ.get(error.code, v2.INTERNAL_SERVER_ERROR), error.message)
    log.exception("v2 call failed", exc_info=error)
    return V2Error(v2.INTERNAL_SERVER_ERROR, f"internal error: {error}")


def v2_status(error: Exception) -> v2.Status:
    return as_v2_error(error).status()


def answers_with_status(response_class: Callable[..., Any]) -> Callable[[Handler], Handler]:
    """Decorate an async unary v2 handler: any refusal becomes the response's status."""
    return errors.answers_with_status(response_class, v2_status)
