"""One error tree for the client SDK and the Spark connector (docs/manual/sdk.md, "Errors"). Catch
`RmqError` for all of them; each subclass that also derives from a builtin (ValueError,
RuntimeError) is still caught where that builtin is.

    RmqError                 the root: `code` (rmq.v1 Code) when there is one, else None
    ├── RmqRefused           a broker or name server answered with a refusal (its `code`)
    ├── RmqUnavailable       transport failure, no answer in time: retried with backoff
    │   └── RequestCancelled the caller cancelled a pull or send
    ├── ConfigError          a client setting or argument is wrong (also ValueError)
    ├── StateError           a call the client's state does not allow (also RuntimeError):
    │                        start twice, poll before start, a group twice per client id
    ├── RmqOptionError       a Spark source option is missing or wrong (also ValueError)
    ├── RmqSinkError         the sink cannot write an option, schema or row (also ValueError)
    ├── RmqReadError         a queue range could not be read (also RuntimeError)
    │   └── RmqDataLossError requested offsets are gone and failOnDataLoss is true
    ├── CorruptMessagesError pulled bytes are not well-formed records (also ValueError)
    └── OffsetResolutionError a starting offset could not be resolved (also RuntimeError)

Errors raised on the client side carry no `code` (None) and print as their message.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from rmq.message_queue import MessageQueue
from rmq.v1 import rmq_pb2


class RmqError(Exception):
    """Root of the rmq client and connector errors; for a refused call, the broker's `code`
    and `message` and where it happened."""

    acknowledged: int = 0  # set by send(): messages acknowledged before the failing request

    def __init__(self, code: int | None, message: str, *, broker: str | None = None,
                 queue: MessageQueue | None = None) -> None:
        super().__init__(message) if code is None else super().__init__(code, message)
        self.code = code
        self.message = message
        self.broker = broker
        self.queue = queue

    @property
    def code_name(self) -> str:
        if self.code is None:
            return ""
        return rmq_pb2.Code.Name(self.code) if self.code in rmq_pb2.Code.values() else str(self.code)

    def __str__(self) -> str:
        where = [f"broker {self.broker}"] if self.broker else []
        where += [f"queue {self.queue}"] if self.queue else []
        text = self.message if self.code is None else f"{self.code_name}: {self.message}"
        return text + (f" ({', '.join(where)})" if where else "")

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_error, (type(self), self.code, self.message, self.broker, self.queue))


def _rebuild_error(cls: type[RmqError], code: int | None, message: str, broker: str | None,
                   queue: MessageQueue | None) -> RmqError:
    error = Exception.__new__(cls)
    RmqError.__init__(error, code, message, broker=broker, queue=queue)
    return error


class RmqRefused(RmqError):
    """A broker or name server refused the call: `code` says why (rmq.v1 Code)."""


class RmqUnavailable(RmqError):
    """The broker or name server could not be reached in time; retry with backoff."""

    def __init__(self, message: str, *, broker: str | None = None, queue: MessageQueue | None = None) -> None:
        super().__init__(rmq_pb2.SERVICE_NOT_AVAILABLE, message, broker=broker, queue=queue)


class RequestCancelled(RmqUnavailable):
    """The caller cancelled the request (a pull or send over either port)."""


class _ClientSideError(RmqError):
    def __init__(self, message: str) -> None:
        super().__init__(None, message)


class ConfigError(_ClientSideError, ValueError):
    """A client setting or argument is missing or wrong (the message names it and what is expected)."""


class StateError(_ClientSideError, RuntimeError):
    """The call is not allowed in the client's current state (not started, started twice, shut down)."""


class RmqOptionError(_ClientSideError, ValueError):
    """A source option is missing, unknown or has a wrong value."""


class RmqSinkError(_ClientSideError, ValueError):
    """A sink option, the DataFrame's schema or a row cannot be written to rmq."""


class RmqReadError(_ClientSideError, RuntimeError):
    """A queue range could not be read (broker unreachable past the retry window)."""


class RmqDataLossError(RmqReadError):
    """Requested offsets no longer exist on the broker and failOnDataLoss is true."""


class CorruptMessagesError(_ClientSideError, ValueError):
    """The packed buffer does not hold well-formed CommitLog records."""


class OffsetResolutionError(_ClientSideError, RuntimeError):
    """A starting offset could not be resolved (e.g. the committed offset could not be read)."""


@contextlib.contextmanager
def config_errors() -> Iterator[None]:
    """Arguments refused by the parsers the SDK shares with the broker (`rmq.auth`,
    `rmq.subscription`, `rmq.sql92` raise ValueError) surface as ConfigError, same message."""
    try:
        yield
    except RmqError:
        raise
    except ValueError as error:
        raise ConfigError(str(error)) from None
