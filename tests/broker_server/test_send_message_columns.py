"""SendMessage with MessageColumns: stored like the same messages in the repeated Message form,
round-robin shared with it, and refused whole with specific errors."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from rmq import message_format as mf
from rmq.stored_message import StoredMessage, decode_records
from rmq.v1 import rmq_pb2
from tests.broker_server import test_processors
from tests.broker_server.store_fixture import wait_dispatched
from tests.broker_server.test_processors import PEER, Broker, pull, send

broker = test_processors.broker   # the fixture: topic "T" with 4 queues on a real store


def send_columns(broker: Broker, bodies: list[bytes], tags: list[str] = (), keys: list[str] = (),
                 lengths: list[int] | None = None) -> rmq_pb2.SendMessageResponse:
    columns = rmq_pb2.MessageColumns(bodies=b"".join(bodies), tags=tags, keys=keys,
                                     body_lengths=lengths or [len(b) for b in bodies])
    request = rmq_pb2.SendMessageRequest(topic="T", columns=columns)
    return asyncio.run(broker.send.process(request, PEER))


def pulled(broker: Broker, queue_id: int, count: int) -> list[StoredMessage]:
    wait_dispatched(broker.store, "T", queue_id, count)
    found = pull(broker, queue_id, 0)
    return decode_records(found.messages.records, np.frombuffer(found.messages.sizes, dtype="<i4"))


def test_columns_are_stored_like_messages(broker: Broker) -> None:
    first = send(broker, rmq_pb2.Message(body=b"m0", tags="A", keys="k0"))
    response = send_columns(broker, [b"m1", b"m22", b"m333", b"m4", b"m5"], tags=["A"], keys=["k1"])
    assert response.status.code == rmq_pb2.OK
    assert list(first.queue_ids) + list(response.queue_ids) == [0, 1, 2, 3, 0, 1]   # one round-robin
    assert list(response.queue_offsets) == [0, 0, 0, 1, 1]
    stored = pulled(broker, 0, 2)
    assert [(m.body, m.properties) for m in stored] == [
        (b"m0", {mf.PROPERTY_TAGS: "A", mf.PROPERTY_KEYS: "k0"}),
        (b"m4", {mf.PROPERTY_TAGS: "A", mf.PROPERTY_KEYS: "k1"})]
    assert stored[1].born_host == stored[0].born_host and stored[1].born_timestamp > 0
    assert list(response.msg_ids[3:4]) == [
        mf.message_id(broker.store.config.store_host_bytes(), stored[1].physical_offset)]


def test_per_message_and_absent_tags_and_keys(broker: Broker) -> None:
    assert send_columns(broker, [b"a", b"b", b"c", b"d"], tags=["x", "y", "", "z"]).status.code == rmq_pb2.OK
    assert send_columns(broker, [b"e"] * 4).status.code == rmq_pb2.OK
    stored = pulled(broker, 0, 2)
    assert [(m.body, m.properties) for m in stored] == [(b"a", {mf.PROPERTY_TAGS: "x"}), (b"e", {})]
    assert [m.properties for m in pulled(broker, 2, 2)] == [{}, {}]


@pytest.mark.parametrize(("columns", "code", "text"), [
    (dict(bodies=[b"ok", b""], lengths=[2, 0]), rmq_pb2.MESSAGE_ILLEGAL, "message 1: message body is empty"),
    (dict(bodies=[b"ok", b"x"], lengths=[2, 2]), rmq_pb2.ILLEGAL_ARGUMENT,
     "body_lengths add up to 4 bytes but bodies holds 3"),
    (dict(bodies=[b"a", b"b", b"c"], tags=["x", "y"]), rmq_pb2.ILLEGAL_ARGUMENT,
     "columns.tags holds 2 values for 3 messages"),
    (dict(bodies=[b"a"], keys=["k\x01"]), rmq_pb2.MESSAGE_ILLEGAL, "columns: property 'KEYS' contains"),
    (dict(bodies=[]), rmq_pb2.ILLEGAL_ARGUMENT, "the batch holds no messages"),
])
def test_bad_columns_are_refused_whole(broker: Broker, columns: dict, code: int, text: str) -> None:
    response = send_columns(broker, **columns)
    assert response.status.code == code
    assert response.status.message.startswith(text)
    assert broker.store.get_commit_log_max_offset() == 0


def test_messages_and_columns_together_are_refused(broker: Broker) -> None:
    request = rmq_pb2.SendMessageRequest(topic="T", messages=[rmq_pb2.Message(body=b"x")],
                                         columns=rmq_pb2.MessageColumns(bodies=b"y", body_lengths=[1]))
    response = asyncio.run(broker.send.process(request, PEER))
    assert (response.status.code, response.status.message) == (
        rmq_pb2.ILLEGAL_ARGUMENT, "a request carries messages or columns, not both")
