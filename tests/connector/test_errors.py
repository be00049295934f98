"""One error tree for the client and the connector: every error is an RmqError, keeps its
builtin base (callers catching ValueError / RuntimeError still do), prints as before and
survives pickling (Spark ships errors between processes)."""

from __future__ import annotations

import pickle

import pytest

from rmq.connector.errors import (
    CorruptMessagesError,
    OffsetResolutionError,
    RmqDataLossError,
    RmqError,
    RmqOptionError,
    RmqReadError,
    RmqSinkError,
    RmqUnavailable,
)
from rmq.message_queue import MessageQueue
from rmq.v1 import rmq_pb2

CLIENT_SIDE = [
    (RmqOptionError, ValueError),
    (RmqSinkError, ValueError),
    (RmqReadError, RuntimeError),
    (RmqDataLossError, RuntimeError),
    (CorruptMessagesError, ValueError),
    (OffsetResolutionError, RuntimeError),
]


@pytest.mark.parametrize(("cls", "builtin"), CLIENT_SIDE)
def test_client_side_errors_are_rmq_errors_and_print_their_message(cls: type[RmqError],
                                                                    builtin: type[Exception]) -> None:
    error = cls("Invalid value 'x' for option 'topic'")
    assert isinstance(error, RmqError) and isinstance(error, builtin)
    assert str(error) == "Invalid value 'x' for option 'topic'"
    assert error.code is None and error.code_name == ""
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.code) == (cls, str(error), None)


def test_data_loss_is_a_read_error() -> None:
    assert issubclass(RmqDataLossError, RmqReadError)


def test_a_refused_call_names_code_broker_and_queue() -> None:
    mq = MessageQueue("T", "broker-a", 3)
    error = RmqError(rmq_pb2.TOPIC_NOT_EXIST, "no topic T", broker="10.0.0.1:10911", queue=mq)
    assert str(error) == "TOPIC_NOT_EXIST: no topic T (broker 10.0.0.1:10911, queue T:broker-a:3)"
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), copy.code, copy.message, copy.broker, copy.queue) == (
        RmqError, rmq_pb2.TOPIC_NOT_EXIST, "no topic T", "10.0.0.1:10911", mq)


def test_unavailable_is_service_not_available() -> None:
    error = RmqUnavailable("deadline exceeded", broker="10.0.0.1:10911")
    assert error.code == rmq_pb2.SERVICE_NOT_AVAILABLE
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy)) == (RmqUnavailable, str(error))
