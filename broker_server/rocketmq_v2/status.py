"""Business outcomes of v2 calls: `Status{code, message}` with apache.rocketmq.v2 Codes inside
every response (spec rocketmq-v2-protocol.md §1: the client checks the status, never a gRPC
error). Handlers raise `V2Error`, or rmq's `RequestError`, whose Code is mapped here."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from rmq.broker_server.rmq_v1.status import RequestError
from rmq.broker_server.rocketmq_v2.messages import InvalidMessage
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
}


class V2Error(Exception):
    def __init__(self, code: v2.Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def status(self) -> v2.Status:
        return v2.Status(code=self.code, message=self.message)


def as_v2_error(error: Exception) -> V2Error:
    """A refusal from rmq's processors (or a bad message) as the v2 status the client gets."""
    if isinstance(error, V2Error):
        return error
    if isinstance(error, InvalidMessage):
        return V2Error(error.code, error.message)
    if isinstance(error, RequestError):
        return V2Error(_FROM_RMQ.get(error.code, v2.INTERNAL_SERVER_ERROR), error.message)
    log.exception("v2 call failed", exc_info=error)
    return V2Error(v2.INTERNAL_SERVER_ERROR, f"internal error: {error}")


def answers_with_status(response_class: type) -> Callable:
    """Decorate an async unary v2 handler: any refusal becomes the response's status."""

    def decorate(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(handler)
        async def answer(self: Any, request: Any, context: Any) -> Any:
            try:
                return await handler(self, request, context)
            except Exception as error:
                return response_class(status=as_v2_error(error).status())

        return answer

    return decorate
