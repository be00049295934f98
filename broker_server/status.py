"""Business outcomes of an rmq.v1 request: `Status{code, message}` inside every response
(rmq.proto conventions). Processors raise `BrokerError` (rmq.broker_server.errors), whose Code is
rmq.v1's own; the gRPC services answer it as the response's Status, so a refused request never
becomes a transport error."""

from __future__ import annotations

import logging
from collections.abc import Callable

from rmq.broker_server import errors
from rmq.broker_server.errors import BrokerError, EdgeError, Handler
from rmq.v1 import rmq_pb2

log = logging.getLogger(__name__)

OK = rmq_pb2.Status(code=rmq_pb2.OK)


def v1_status(error: Exception) -> rmq_pb2.Status:
    """A BrokerError as its Status; anything else a SYSTEM_ERROR, logged with its traceback."""
    if isinstance(error, BrokerError) and not isinstance(error, EdgeError):
        return error.status()
    log.exception("rmq.v1 call failed", exc_info=error)
    return rmq_pb2.Status(code=rmq_pb2.SYSTEM_ERROR, message=f"internal error: {error}")


def answers_with_status(response_class: Callable[..., object]) -> Callable[[Handler], Handler]:
    return errors.answers_with_status(response_class, v1_status)
