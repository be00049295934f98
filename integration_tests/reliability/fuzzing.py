"""Hypothesis strategies for hostile gRPC requests, built from the rmq.v1 descriptors: every
field of every request of the broker's services gets boundary-heavy random values (negative
and huge numbers, odd and over-long names, random bytes)."""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, MethodDescriptor
from hypothesis import strategies as st

from rmq.v1 import rmq_pb2

BROKER_SERVICES = ("MessagingService", "AdminService", "RouteService")
INT32 = (-2**31, 2**31 - 1)
INT64 = (-2**63, 2**63 - 1)
NAMES = st.sampled_from(["", "fuzz", "fuzz-topic", "a" * 127, "a" * 128, "bad topic", "%RETRY%fuzz",
                         "SCHEDULE_TOPIC_XXXX", "../../etc", "t\x00t", "\u00e9\u00e8"])


@dataclass(frozen=True)
class Rpc:
    path: str                     # /rmq.v1.Service/Method
    request_class: type
    response_class: type


def broker_rpcs() -> list[Rpc]:
    rpcs = []
    for service_name in BROKER_SERVICES:
        service = rmq_pb2.DESCRIPTOR.services_by_name[service_name]
        rpcs += [_rpc(service.full_name, method) for method in service.methods]
    return rpcs


def _rpc(service: str, method: MethodDescriptor) -> Rpc:
    return Rpc(f"/{service}/{method.name}", message_factory.GetMessageClass(method.input_type),
               message_factory.GetMessageClass(method.output_type))


def _integers(bounds: tuple[int, int]) -> st.SearchStrategy[int]:
    low, high = bounds
    return st.one_of(st.sampled_from([0, 1, -1, low, high, 2**31 - 1, 4097, 32768]),
                     st.integers(low, high), st.integers(-1000, 1000))


def _scalar(field: FieldDescriptor) -> st.SearchStrategy:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return st.one_of(NAMES, st.text(max_size=64))
    if kind == FieldDescriptor.TYPE_BYTES:
        return st.binary(max_size=2048)
    if kind == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if kind in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
        return _integers(INT64)
    if kind == FieldDescriptor.TYPE_ENUM:
        return st.one_of(st.sampled_from([v.number for v in field.enum_type.values]), st.integers(-5, 50))
    return _integers(INT32)


def message_fields(descriptor: Descriptor, depth: int = 0) -> st.SearchStrategy[dict]:
    """Keyword arguments for the message class of `descriptor`: a random subset of its fields."""
    fields = {}
    for field in descriptor.fields:
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            key, value = field.message_type.fields
            fields[field.name] = st.dictionaries(_scalar(key), _scalar(value), max_size=4)
        elif field.message_type is not None:
            if depth >= 2:
                continue
            sub_class = message_factory.GetMessageClass(field.message_type)
            sub = message_fields(field.message_type, depth + 1).map(lambda kw, c=sub_class: c(**kw))
            fields[field.name] = st.lists(sub, max_size=5) if _repeated(field) else sub
        else:
            fields[field.name] = st.lists(_scalar(field), max_size=5) if _repeated(field) else _scalar(field)
    return st.fixed_dictionaries({}, optional=fields)


def _repeated(field: FieldDescriptor) -> bool:
    return field.is_repeated


def requests() -> st.SearchStrategy[tuple[Rpc, object]]:
    """(rpc, request message) for any broker RPC."""
    return st.sampled_from(broker_rpcs()).flatmap(_request_of)


def _request_of(rpc: Rpc) -> st.SearchStrategy[tuple[Rpc, object]]:
    return message_fields(rpc.request_class.DESCRIPTOR).map(lambda kw: (rpc, rpc.request_class(**kw)))


def invalid_utf8_topic_request() -> st.SearchStrategy[bytes]:
    """Raw bytes of a request whose field 1 (the topic in most requests) is not UTF-8."""
    return st.binary(min_size=1, max_size=64).filter(_not_utf8).map(lambda b: b"\x0a" + bytes([len(b)]) + b)


def _not_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return True
    return False
