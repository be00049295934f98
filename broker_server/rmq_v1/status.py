"""Business outcomes of a request: `Status{code, message}` inside every response (rmq.proto
conventions). Processors raise `RequestError`; the gRPC services turn it into the response's
Status, so a refused request never becomes a transport error."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable

from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)

Code = rmq_pb2.Code


class RequestError(Exception):
    """A request the broker refuses, with the Code and the one-line reason it reports."""

    def __init__(self, code: rmq_pb2.Code, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def status(self) -> rmq_pb2.Status:
        return rmq_pb2.Status(code=self.code, message=self.message)


OK = rmq_pb2.Status(code=rmq_pb2.OK)


def illegal_argument(message: str) -> RequestError:
    return RequestError(rmq_pb2.ILLEGAL_ARGUMENT, message)


def answers_with_status(response_class: type) -> Callable:
    """Decorate an async gRPC handler so a RequestError becomes the response's Status and any
    other exception a SYSTEM_ERROR (logged with its traceback): a bad request never reaches
    the transport as an error and never takes the server down."""

    def decorate(handler: Callable[..., Awaitable]) -> Callable[..., Awaitable]:
        @functools.wraps(handler)
        async def answer(self, request, context):
            try:
                return await handler(self, request, context)
            except RequestError as error:
                return response_class(status=error.status())
            except Exception as error:
                log.exception("%s failed", handler.__name__)
                return response_class(
                    status=rmq_pb2.Status(code=rmq_pb2.SYSTEM_ERROR, message=f"internal error: {error}")
                )

        return answer

    return decorate
