"""The broker's one error tree (broker_server/errors.py): every exception the broker defines is a
BrokerError, and each protocol edge answers one with that protocol's status."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import grpc

import rmq.broker_server
from rmq.broker_server.errors import BrokerError, NotMaster, illegal_argument
from rmq.broker_server.remoting.dispatch import Refusal, remoting_answer
from rmq.broker_server.rocketmq_v2.status import V2Error, v2_status
from rmq.broker_server.security.request_auth import CallRefused
from rmq.broker_server.status import v1_status
from rmq.remoting.request_code import RMQ_CODE_FIELD, ResponseCode
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.v1 import rmq_pb2


def broker_exception_classes() -> list[type[BaseException]]:
    classes = []
    for module_info in pkgutil.walk_packages(rmq.broker_server.__path__, "rmq.broker_server."):
        module = importlib.import_module(module_info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == module.__name__:
                classes.append(value)
    return classes


def test_every_exception_the_broker_defines_is_a_broker_error() -> None:
    classes = broker_exception_classes()
    assert len(classes) >= 15     # the walk found the broker's modules
    assert [c.__qualname__ for c in classes if not issubclass(c, BrokerError)] == []


def test_a_slave_refusal_is_each_protocols_not_master_status() -> None:
    refusal = NotMaster("this broker is a SLAVE (read-only)")
    assert v1_status(refusal).code == rmq_pb2.SERVICE_NOT_AVAILABLE
    assert v2_status(refusal).code == v2.FORBIDDEN
    assert remoting_answer(refusal)[0] is ResponseCode.SERVICE_NOT_AVAILABLE


def test_a_code_is_mapped_at_every_edge_and_an_edge_code_stays_at_its_edge() -> None:
    bad = illegal_argument("queue_id 9 is out of range")
    assert (v1_status(bad).code, v2_status(bad).code) == (rmq_pb2.ILLEGAL_ARGUMENT, v2.BAD_REQUEST)
    assert remoting_answer(bad) == (ResponseCode.SYSTEM_ERROR, "queue_id 9 is out of range",
                                    {RMQ_CODE_FIELD: str(rmq_pb2.ILLEGAL_ARGUMENT)})   # the exact code too
    assert v2_status(V2Error(v2.INVALID_RECEIPT_HANDLE, "x")).code == v2.INVALID_RECEIPT_HANDLE
    assert remoting_answer(Refusal(ResponseCode.TOPIC_NOT_EXIST, "no topic")) == (
        ResponseCode.TOPIC_NOT_EXIST, "no topic", {})
    # another edge's code never leaks as this edge's: an internal error instead
    foreign = CallRefused(grpc.StatusCode.PERMISSION_DENIED, "denied")
    assert v1_status(foreign).code == rmq_pb2.SYSTEM_ERROR
    assert remoting_answer(foreign)[0] is ResponseCode.SYSTEM_ERROR
