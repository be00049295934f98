"""The broker's one error tree. Every refusal and failure the broker and the name server raise is
a `BrokerError`: a code and a one-line reason. The code is rmq.v1's `Code` enum, the broker's own
vocabulary, turned into each protocol's status at its edge: the rmq.v1 Status (broker_server/status.py),
the RocketMQ 5 Code (rocketmq_v2/status.py), the remoting response code (remoting/dispatch.py).
A refusal that only one edge raises and has no rmq.v1 Code for (a RocketMQ 5 receipt handle's
status, a gRPC interceptor's transport status, an HTTP scrape's) is an `EdgeError` carrying that
edge's own code, answered as is there.

Bad flags, config or files at start are `UserError` (rmq.command_line, re-exported here): the
`rmq` command's own error, shared with the client commands, reported as one line."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from rmq.command_line import UserError as UserError
from rmq.v1 import rmq_pb2

Code = rmq_pb2.Code


class BrokerError(Exception):
    """A request the broker refuses, or a failure it reports, with its Code and reason."""

    code: Any   # an rmq.v1 Code; an EdgeError's own edge's code (which one, its class says)

    def __init__(self, code: rmq_pb2.Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def status(self) -> rmq_pb2.Status:
        return rmq_pb2.Status(code=self.code, message=self.message)


class EdgeError(BrokerError):
    """A refusal raised and answered by one protocol edge only, with that edge's own code (a
    RocketMQ 5 Code, a remoting ResponseCode, a grpc.StatusCode, an HTTPStatus) in `code`."""

    def __init__(self, code: Any, message: str) -> None:
        Exception.__init__(self, message)
        self.code = code
        self.message = message


class NotMaster(BrokerError):
    """A write sent to a slave (read-only): rmq.v1 and remoting answer SERVICE_NOT_AVAILABLE,
    RocketMQ 5 FORBIDDEN (a write to a place that is not writeable, like a read-only topic)."""

    def __init__(self, message: str) -> None:
        super().__init__(rmq_pb2.SERVICE_NOT_AVAILABLE, message)


class UnknownTransaction(BrokerError):
    """EndTransaction names a transaction that is not open here (never opened, already ended, or
    opened for another message or topic): RocketMQ 5 answers INVALID_TRANSACTION_ID, remoting
    SYSTEM_ERROR (RocketMQ's EndTransactionProcessor, when it finds no prepared message)."""

    def __init__(self, message: str) -> None:
        super().__init__(rmq_pb2.ILLEGAL_ARGUMENT, message)


class InvalidReceiptHandle(BrokerError, ValueError):
    """A pop receipt handle this broker did not issue (malformed, forged, or for another topic or
    group), or one that no longer names the current delivery (acknowledged, or delivered again
    since): RocketMQ 5 answers INVALID_RECEIPT_HANDLE."""

    def __init__(self, message: str) -> None:
        super().__init__(rmq_pb2.ILLEGAL_ARGUMENT, message)


class IllegalInvisibleTime(BrokerError):
    """A pop's or a change's invisibility outside the broker's bounds: RocketMQ 5 answers
    ILLEGAL_INVISIBLE_TIME."""

    def __init__(self, message: str) -> None:
        super().__init__(rmq_pb2.ILLEGAL_ARGUMENT, message)


class TopicRouteNotFound(BrokerError):
    """A route lookup for a topic this broker does not hold (and no name server knows): rmq.v1
    answers TOPIC_NOT_EXIST, remoting TOPIC_NOT_EXIST and RocketMQ 5 TOPIC_NOT_FOUND, each in its
    own words (so `topic` and `broker_name` are kept)."""

    def __init__(self, topic: str, broker_name: str) -> None:
        super().__init__(rmq_pb2.TOPIC_NOT_EXIST,
                         f"no route for topic {topic!r}: broker {broker_name} does not hold it")
        self.topic = topic
        self.broker_name = broker_name


def illegal_argument(message: str) -> BrokerError:
    return BrokerError(rmq_pb2.ILLEGAL_ARGUMENT, message)


Handler = Callable[[Any, Any, Any], Awaitable[Any]]


def answers_with_status(
    response_class: Callable[..., Any], status_of: Callable[[Exception], Any]
) -> Callable[[Handler], Handler]:
    """Decorate an async unary gRPC handler `(self, request, context)` so an exception becomes the
    response's status, as the edge's `status_of` maps it: a refused request never reaches the
    transport as an error and never takes the server down."""

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def answer(self: Any, request: Any, context: Any) -> Any:
            try:
                return await handler(self, request, context)
            except Exception as error:
                return response_class(status=status_of(error))

        return answer

    return decorate
