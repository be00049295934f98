"""MQAdmin on a real in-process broker: messages by key, id and time range (bounded, paged), a
group's members with the queues they own, its progress, offset resets and deletion."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq import retry
from rmq.connector.admin import ClientProtocol, MQAdmin, ResetTarget, ResetTo, parse_msg_id
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.errors import ConfigError, RmqError, RmqRefused
from rmq.v1 import rmq_pb2
from tests.broker_server.in_process_broker import running_broker


@pytest.fixture
def client(tmp_path: Path) -> Iterator[RmqClient]:
    with running_broker(tmp_path) as broker, RmqClient(broker.address) as rmq_client:
        rmq_client.create_topic("Orders", queues=4)
        yield rmq_client


def q(queue_id: int, topic: str = "Orders") -> MessageQueue:
    return MessageQueue(topic, "broker-a", queue_id)


def test_messages_by_key_and_by_id(client: RmqClient) -> None:
    client.send("Orders", [OutgoingMessage(f"body-{i}".encode(), keys=f"order-{i % 3} common", queue_id=i % 4)
                           for i in range(9)])
    admin = MQAdmin(client)
    found = admin.query_by_key("Orders", "order-1")
    assert [m.body for m in found] == [b"body-1", b"body-4", b"body-7"]
    assert len(admin.query_by_key("Orders", "common", limit=5)) == 5
    assert admin.query_by_key("Orders", "order-9") == []
    viewed = admin.view(found[1].msg_id)
    assert (viewed.body, viewed.topic, viewed.queue_id, viewed.queue_offset) == (
        b"body-4", "Orders", found[1].queue_id, found[1].queue_offset)


def test_a_bad_or_unknown_message_id_is_a_clear_error(client: RmqClient) -> None:
    admin = MQAdmin(client)
    with pytest.raises(ConfigError, match="is not a message id"):
        admin.view("not-an-id")
    with pytest.raises(RmqRefused, match="not in this cluster") as unknown:
        admin.view("0A0000010000270F0000000000000000")     # 10.0.0.1:9999
    assert unknown.value.code == rmq_pb2.QUERY_NOT_FOUND
    client.send("Orders", [OutgoingMessage(b"x", queue_id=0)])
    address, _ = parse_msg_id(admin.query_by_time("Orders", 0, 2**62)[0].msg_id)
    host, port = address.split(":")
    store_host = bytes(map(int, host.split("."))) + int(port).to_bytes(4, "big")
    with pytest.raises(RmqError) as missing:      # CommitLog offset 7: inside a record, not its start
        admin.view((store_host + (7).to_bytes(8, "big")).hex().upper())
    assert missing.value.code == rmq_pb2.QUERY_NOT_FOUND


def test_time_range_pages_cover_the_range_once(client: RmqClient) -> None:
    client.send("Orders", [OutgoingMessage(f"{i}".encode(), queue_id=i % 4) for i in range(10)])
    admin = MQAdmin(client)
    pages = [admin.query_by_time("Orders", 0, 2**62, limit=3, page=p) for p in range(5)]
    assert [len(page) for page in pages] == [3, 3, 3, 1, 0]
    assert sorted(m.body for page in pages for m in page) == sorted(f"{i}".encode() for i in range(10))
    assert admin.query_by_time("Orders", 2**61, 2**62) == []


def test_members_own_disjoint_queues_and_progress_names_the_owner(client: RmqClient) -> None:
    client.heartbeat("client-b", "g1", {"Orders": "*"})
    client.heartbeat("client-a", "g1", {"Orders": "*"})
    client.send("Orders", [OutgoingMessage(b"x", queue_id=i % 4) for i in range(8)])
    client.update_consumer_offsets("g1", {q(0): 1, q(1): 2})
    admin = MQAdmin(client)
    members = admin.members("g1")
    assert [m.client_id for m in members] == ["client-a", "client-b"]
    assert all(m.protocol is ClientProtocol.RMQ and m.address for m in members)
    assert members[0].queues == (q(0), q(1)) and members[1].queues == (q(2), q(3))
    progress = admin.progress("g1", "Orders")
    by_queue = {row.queue: row for row in progress.queues}
    assert (by_queue[q(0)].lag, by_queue[q(0)].owner) == (1, "client-a")
    assert (by_queue[q(3)].lag, by_queue[q(3)].owner) == (2, "client-b")
    assert progress.total_lag == 1 + 0 + 2 + 2 and progress.complete
    assert retry.retry_topic("g1") in {row.queue.topic for row in progress.queues}


def test_reset_is_refused_while_members_live_unless_forced(client: RmqClient) -> None:
    client.send("Orders", [OutgoingMessage(b"x", queue_id=0) for _ in range(5)])
    client.heartbeat("client-a", "g1", {"Orders": "*"})
    admin = MQAdmin(client)
    with pytest.raises(RmqError, match="live member"):
        admin.reset_offsets("g1", "Orders", ResetTarget(ResetTo.LATEST))
    admin.reset_offsets("g1", "Orders", ResetTarget(ResetTo.LATEST), force=True)
    assert client.query_consumer_offsets("g1", "Orders")[q(0)] == 5
    client.unregister("client-a", "g1")
    admin.reset_offsets("g1", "Orders", ResetTarget(ResetTo.EARLIEST))
    assert client.query_consumer_offsets("g1", "Orders")[q(0)] == 0


def test_reset_to_a_time(client: RmqClient) -> None:
    client.send("Orders", [OutgoingMessage(b"old", queue_id=0) for _ in range(3)])
    first_ms = MQAdmin(client).browse(q(0), 0, 1)[0].store_timestamp
    while time.time() * 1000 <= first_ms + 1:     # the next batch gets a later store time
        pass
    client.send("Orders", [OutgoingMessage(b"new", queue_id=0) for _ in range(2)])
    split_ms = MQAdmin(client).browse(q(0), 3, 4)[0].store_timestamp
    admin = MQAdmin(client)
    at_split = admin.reset_offsets("g1", "Orders", ResetTarget(ResetTo.TIMESTAMP, split_ms))
    results = {r.queue: r for r in at_split.results}
    assert results[q(0)].offset == 3 and not results[q(0)].note
    earliest = admin.reset_offsets("g1", "Orders", ResetTarget(ResetTo.TIMESTAMP, 1))
    before = {r.queue: r for r in earliest.results}
    assert before[q(0)].offset == 0 and "before the earliest" in before[q(0)].note
    assert client.query_consumer_offsets("g1", "Orders")[q(0)] == 0


@pytest.mark.parametrize("text, target", [
    ("earliest", ResetTarget(ResetTo.EARLIEST)), ("latest", ResetTarget(ResetTo.LATEST)),
    ("timestamp:1700000000000", ResetTarget(ResetTo.TIMESTAMP, 1700000000000)),
])
def test_reset_targets_parse(text: str, target: ResetTarget) -> None:
    assert ResetTarget.parse(text) == target


@pytest.mark.parametrize("text", ["", "first", "timestamp:", "timestamp:-5", "timestamp:abc"])
def test_bad_reset_targets_name_the_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError, match="earliest, latest or timestamp:<epoch-ms>"):
        ResetTarget.parse(text)


def test_delete_group_forgets_its_offsets_and_retry_topics(client: RmqClient) -> None:
    client.send("Orders", [OutgoingMessage(b"x", queue_id=0)])
    client.heartbeat("client-a", "g1", {"Orders": "*"})     # creates %RETRY%g1
    client.update_consumer_offsets("g1", {q(0): 1})
    admin = MQAdmin(client)
    with pytest.raises(RmqError, match="live member"):
        admin.delete_group("g1")
    client.unregister("client-a", "g1")
    assert admin.delete_group("g1") == ["Orders"]
    assert client.query_consumer_offsets("g1") == {}
    assert "g1" not in admin.groups()
