"""RmqClient.send: plain messages travel as MessageColumns, split under the request size limit."""

from __future__ import annotations

from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.v1 import rmq_pb2


def decoded(request: rmq_pb2.SendMessageRequest) -> list[tuple[bytes, str, str]]:
    """(body, tags, keys) per message of a MessageColumns request."""
    columns = request.columns
    count = len(columns.body_lengths)
    tags = list(columns.tags) * (count // len(columns.tags)) if columns.tags else [""] * count
    keys = list(columns.keys) * (count // len(columns.keys)) if columns.keys else [""] * count
    bodies, position = [], 0
    for length in columns.body_lengths:
        bodies.append(columns.bodies[position:position + length])
        position += length
    assert position == len(columns.bodies)
    return list(zip(bodies, tags, keys, strict=True))


def column_requests(messages: list[OutgoingMessage], limit: int) -> list[rmq_pb2.SendMessageRequest]:
    with RmqClient("127.0.0.1:1", max_request_bytes=limit) as client:   # connects on first call
        return client.column_requests("T", [m.body for m in messages], [m.tags for m in messages],
                                      [m.keys for m in messages])


def test_plain_messages_only() -> None:
    assert OutgoingMessage(b"x", tags="T", keys="k").is_plain()
    assert not OutgoingMessage(b"x", properties={"a": "b"}).is_plain()
    assert not OutgoingMessage(b"x", queue_id=0).is_plain()
    assert not OutgoingMessage(b"x", delay_level=2).is_plain()


def test_columns_carry_every_message_in_order_under_the_limit() -> None:
    messages = [OutgoingMessage(bytes([i]) * (i * 7 % 900 + 1), tags=f"t{i % 3}", keys=f"k{i}")
                for i in range(200)]

    requests = column_requests(messages, 10_000)

    assert len(requests) > 5
    assert all(r.topic == "T" and not r.messages and r.ByteSize() <= 10_000 for r in requests)
    assert [m for r in requests for m in decoded(r)] == [(m.body, m.tags, m.keys) for m in messages]


def test_shared_and_absent_strings_are_sent_once_or_not_at_all() -> None:
    request, = column_requests([OutgoingMessage(b"a", tags="T")] * 3, 1 << 20)
    assert (list(request.columns.tags), list(request.columns.keys)) == (["T"], [])
    assert decoded(request) == [(b"a", "T", "")] * 3


def test_a_message_above_the_limit_travels_alone() -> None:
    small, big = OutgoingMessage(b"x"), OutgoingMessage(b"y" * 5000)
    requests = column_requests([small, big, small], 1000)
    assert [decoded(r) for r in requests] == [[(b"x", "", "")], [(b"y" * 5000, "", "")], [(b"x", "", "")]]
