"""RmqClient against a whole broker in this process (over gRPC), and through `rmq namesrv` with
two broker processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.connector.client import (
    PERM_READ,
    PERM_WRITE,
    GetMessageStatus,
    MessageQueue,
    OutgoingMessage,
    PullStatus,
    RmqClient,
    RmqError,
    RmqUnavailable,
)
from rmq.connector.spark.message_decoder import decode
from rmq.v1 import rmq_pb2
from testing import processes
from tests.broker_server.in_process_broker import InProcessBroker, running_broker
from tests.waiting import wait_until

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    with running_broker(tmp_path_factory.mktemp("client"), flush="sync") as server:
        yield server


@pytest.fixture
def client(broker: InProcessBroker) -> Iterator[RmqClient]:
    with RmqClient(broker.address, timeout=10) as rmq_client:
        yield rmq_client


def test_create_topic_and_route(client: RmqClient, broker: InProcessBroker) -> None:
    assert client.create_topic("RouteT", queues=4) == ["broker-a"]

    route = client.query_route("RouteT")

    assert route.brokers == {"broker-a": broker.address}
    assert route.message_queues == tuple(MessageQueue("RouteT", "broker-a", i) for i in range(4))
    assert client.list_brokers() == {"broker-a": broker.address}
    config = {t.topic_name: t for t in client.list_topics()}["RouteT"]
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (4, 4, 6)


def test_update_topic_grows_the_route_and_keeps_the_perm_unless_given(client: RmqClient) -> None:
    client.create_topic("GrowT", queues=2, perm=PERM_READ)
    assert client.update_topic("GrowT", queues=3) == ["broker-a"]
    route = client.query_route("GrowT")
    assert route.message_queues == tuple(MessageQueue("GrowT", "broker-a", i) for i in range(3))
    assert [(q.write_queue_nums, q.perm) for q in route.queue_datas] == [(3, PERM_READ)]
    client.update_topic("GrowT", queues=3, perm=PERM_READ | PERM_WRITE)
    assert [q.perm for q in client.query_route("GrowT").queue_datas] == [PERM_READ | PERM_WRITE]
    with pytest.raises(RmqError, match="ILLEGAL_ARGUMENT: topic 'GrowT' cannot shrink from 3 to 1"):
        client.update_topic("GrowT", queues=1)


def test_send_then_pull_returns_the_messages_with_their_ids(client: RmqClient) -> None:
    client.create_topic("RoundTrip", queues=2)
    messages = [OutgoingMessage(f"body-{i}".encode(), tags="TagA", keys=f"k{i}", properties={"n": str(i)},
                                queue_id=1) for i in range(10)]

    sent = client.send("RoundTrip", messages)
    _wait_dispatched(client, "RoundTrip", 10)
    pulled = client.pull(MessageQueue("RoundTrip", "broker-a", 1), 0, 32, group="g")

    assert (sent.broker_name, sent.queue_ids, sent.queue_offsets) == ("broker-a", [1] * 10, list(range(10)))
    assert (pulled.pull_status, pulled.store_status) == (PullStatus.FOUND, GetMessageStatus.FOUND)
    assert (pulled.next_begin_offset, pulled.min_offset, pulled.max_offset) == (10, 0, 10)
    batch = decode(pulled.messages, "broker-a")
    assert batch.column("body").to_pylist() == [m.body for m in messages]
    assert batch.column("msg_id").to_pylist() == sent.msg_ids
    assert batch.column("keys").to_pylist() == [f"k{i}" for i in range(10)]
    assert batch.column("tags").to_pylist() == ["TagA"] * 10
    assert [dict(p)["n"] for p in batch.column("properties").to_pylist()] == [str(i) for i in range(10)]


def test_a_batch_split_into_many_requests_keeps_order(broker: InProcessBroker) -> None:
    with RmqClient(broker.address, max_request_bytes=2000) as small_requests:
        small_requests.create_topic("Split", queues=1)
        bodies = [(b"%03d" % i) * 70 for i in range(50)]

        sent = small_requests.send("Split", [OutgoingMessage(body) for body in bodies])
        _wait_dispatched(small_requests, "Split", 50)
        pulled = small_requests.pull(MessageQueue("Split", "broker-a", 0), 0, 100, group="g")

    assert sent.queue_offsets == list(range(50))
    assert decode(pulled.messages, "broker-a").column("body").to_pylist() == bodies


def test_pull_responses_above_grpcs_default_4_mib_arrive(client: RmqClient) -> None:
    client.create_topic("Large", queues=1)
    client.send("Large", [OutgoingMessage(bytes([i]) * 100_000) for i in range(50)])
    _wait_dispatched(client, "Large", 50)

    pulled = client.pull(MessageQueue("Large", "broker-a", 0), 0, 64, group="g")

    assert len(pulled.messages.records) > 4 * MiB
    assert decode(pulled.messages, "broker-a").num_rows == 50


def test_broker_refusals_become_rmq_errors_naming_broker_and_queue(client: RmqClient) -> None:
    client.create_topic("Refusals", queues=1)
    mq = MessageQueue("NoSuchTopic", "broker-a", 3)

    with pytest.raises(RmqError) as unknown:
        client.pull(mq, 0, 1, group="g")
    with pytest.raises(RmqError) as empty_body:
        client.send("Refusals", [OutgoingMessage(b"")])
    with pytest.raises(RmqError) as oversized:  # 5 MiB passes gRPC (64 MiB limit); the broker refuses it
        client.send("Refusals", [OutgoingMessage(b"x" * (5 * MiB))])

    assert unknown.value.code == rmq_pb2.TOPIC_NOT_EXIST
    assert "NoSuchTopic:broker-a:3" in str(unknown.value) and "broker-a at " in str(unknown.value)
    assert empty_body.value.code == rmq_pb2.MESSAGE_ILLEGAL
    assert oversized.value.code == rmq_pb2.MESSAGE_SIZE_EXCEEDED
    assert client.topic_offsets("Refusals")[MessageQueue("Refusals", "broker-a", 0)].max_offset == 0


def test_pull_statuses_and_offset_corrections(client: RmqClient) -> None:
    client.create_topic("Statuses", queues=1)
    mq = MessageQueue("Statuses", "broker-a", 0)
    client.send("Statuses", [OutgoingMessage(b"a"), OutgoingMessage(b"b")])
    _wait_dispatched(client, "Statuses", 2)

    at_end = client.pull(mq, 2, 32, group="g")
    far_beyond = client.pull(mq, 100, 32, group="g")

    assert (at_end.pull_status, at_end.next_begin_offset) == (PullStatus.NO_NEW_MSG, 2)
    # spec pull §12.2 OFFSET_OVERFLOW_BADLY: with minOffset 0 the correction goes back to 0
    assert (far_beyond.pull_status, far_beyond.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 0)
    assert far_beyond.store_status == GetMessageStatus.OFFSET_OVERFLOW_BADLY


def test_long_polling_pull_is_answered_when_a_message_arrives(client: RmqClient) -> None:
    client.create_topic("LongPoll", queues=1)
    mq = MessageQueue("LongPoll", "broker-a", 0)
    sender = threading.Timer(0.5, lambda: client.send("LongPoll", [OutgoingMessage(b"late")]))
    sender.start()
    try:
        result = client.pull(mq, 0, 32, group="g", suspend_timeout_ms=20_000)
    finally:
        sender.join()

    assert result.pull_status == PullStatus.FOUND
    assert decode(result.messages, "broker-a").column("body").to_pylist() == [b"late"]


def test_topic_offsets_and_search_by_time(client: RmqClient) -> None:
    client.create_topic("Offsets", queues=2)
    client.send("Offsets", [OutgoingMessage(b"x", queue_id=0)] * 3)
    _wait_dispatched(client, "Offsets", 3)
    after_first_batch = int(time.time() * 1000) + 1
    time.sleep(0.05)   # not an event: the broker's clock moves on, so the batches' store times differ
    client.send("Offsets", [OutgoingMessage(b"y", queue_id=0)] * 2)
    _wait_dispatched(client, "Offsets", 5)

    offsets = client.topic_offsets("Offsets")
    q0, q1 = MessageQueue("Offsets", "broker-a", 0), MessageQueue("Offsets", "broker-a", 1)

    assert list(offsets) == [q0, q1]
    assert (offsets[q0].min_offset, offsets[q0].max_offset) == (0, 5)
    assert offsets[q0].last_store_timestamp >= after_first_batch
    assert (offsets[q1].max_offset, offsets[q1].last_store_timestamp) == (0, 0)
    assert client.search_offset(q0, after_first_batch) == 3
    assert client.search_offset(q0, 0) == 0


def test_consumer_offsets_update_query_increase_only_commit_and_remove(client: RmqClient) -> None:
    client.create_topic("Group", queues=2)
    client.send("Group", [OutgoingMessage(b"m", queue_id=q) for q in (0, 1) for _ in range(5)])
    _wait_dispatched(client, "Group", 10)
    q0, q1 = MessageQueue("Group", "broker-a", 0), MessageQueue("Group", "broker-a", 1)

    client.update_consumer_offsets("cg", {q0: 4, q1: 2})
    client.update_consumer_offsets("cg", {q0: 1}, increase_only=True)
    assert client.query_consumer_offsets("cg", "Group") == {q0: 4, q1: 2}

    client.update_consumer_offsets("cg", {q0: 1})
    client.pull(q1, 2, 1, group="cg", commit_offset=3)  # offset piggy-backed on the pull
    assert client.query_consumer_offsets("cg") == {q0: 1, q1: 3}

    client.remove_consumer_offsets("cg", [q0])
    assert client.query_consumer_offsets("cg", "Group") == {q1: 3}
    assert client.query_consumer_offsets("nobody", "Group") == {}


def test_membership_and_queue_locks(client: RmqClient) -> None:
    client.create_topic("Members", queues=2)
    queues = set(client.query_route("Members").message_queues)

    client.heartbeat("client-b", "members", {"Members": "*"})
    client.heartbeat("client-a", "members", {"Members": "*"})
    assert client.consumer_list("members", "Members") == ["client-a", "client-b"]

    assert client.lock_batch("members", "client-a", queues) == queues
    assert client.lock_batch("members", "client-b", queues) == set()
    client.unlock_batch("members", "client-a", queues)
    assert client.lock_batch("members", "client-b", queues) == queues

    client.unregister("client-a", "members")
    assert client.consumer_list("members", "Members") == ["client-b"]


def test_delete_topic(client: RmqClient) -> None:
    client.create_topic("Doomed", queues=1)
    client.delete_topic("Doomed")

    with pytest.raises(RmqError) as caught:
        client.query_route("Doomed")
    assert caught.value.code == rmq_pb2.TOPIC_NOT_EXIST


def test_broker_going_down_raises_unavailable_naming_its_address(tmp_path: Path) -> None:
    server = InProcessBroker(tmp_path).start()
    with RmqClient(server.address, timeout=3) as rmq_client:
        rmq_client.create_topic("Down", queues=1)
        mq = rmq_client.query_route("Down").message_queues[0]
        server.stop()

        with pytest.raises(RmqUnavailable) as caught:
            rmq_client.pull(mq, 0, 1, group="g")

    assert server.address in str(caught.value)


@pytest.mark.integration
def test_name_server_routes_over_two_brokers(tmp_path: Path) -> None:
    namesrv = processes.namesrv(tmp_path).start()
    brokers = [processes.broker(tmp_path, name, namesrv_address=namesrv.address).start()
               for name in ("broker-b", "broker-a")]
    try:
        with RmqClient(namesrv.address) as rmq_client:
            _wait_for(lambda: len(rmq_client.list_brokers()) == 2, "both brokers registered")
            assert rmq_client.create_topic("Spread", queues=2) == ["broker-a", "broker-b"]
            _wait_for(lambda: _route_brokers(rmq_client, "Spread") == 2, "the topic routed on both brokers")

            route = rmq_client.query_route("Spread")
            sends = [rmq_client.send("Spread", [OutgoingMessage(b"m")]).broker_name for _ in range(4)]
            _wait_dispatched(rmq_client, "Spread", 4)
            offsets = rmq_client.topic_offsets("Spread")

        assert route.message_queues == tuple(MessageQueue("Spread", b, q)
                                             for b in ("broker-a", "broker-b") for q in (0, 1))
        assert sorted(sends) == ["broker-a", "broker-a", "broker-b", "broker-b"]
        assert sum(o.max_offset for o in offsets.values()) == 4
        assert list(offsets) == list(route.message_queues)
    finally:
        for server in brokers + [namesrv]:
            server.stop()


def _wait_dispatched(rmq_client: RmqClient, topic: str, count: int) -> None:
    """Sends are acknowledged once stored; ConsumeQueue entries follow asynchronously (reput)."""
    _wait_for(lambda: sum(o.max_offset for o in rmq_client.topic_offsets(topic).values()) == count,
              f"{count} messages of {topic} dispatched")


def _route_brokers(rmq_client: RmqClient, topic: str) -> int:
    try:
        return len(rmq_client.query_route(topic).brokers)
    except RmqError:
        return 0


def _wait_for(condition, what: str, timeout: float = 20.0) -> None:
    wait_until(condition, what, timeout, interval=0.1)


def test_a_failing_request_reports_what_earlier_requests_stored(broker: InProcessBroker) -> None:
    with RmqClient(broker.address, max_request_bytes=1) as one_per_request:  # every message travels alone
        one_per_request.create_topic("Partial", queues=1)
        bodies = [b"a", b"b", b"", b"never sent"]
        with pytest.raises(RmqError) as caught:
            one_per_request.send("Partial", [OutgoingMessage(body) for body in bodies])
        _wait_dispatched(one_per_request, "Partial", 2)

    assert caught.value.code == rmq_pb2.MESSAGE_ILLEGAL
    assert caught.value.acknowledged == 2


def test_a_new_client_reaches_a_broker_at_once_that_another_client_found_down(tmp_path: Path) -> None:
    """After a broker restart a fresh client connects at once: it does not inherit the reconnect
    backoff of another client's connection that saw the broker down (gRPC's shared subchannels
    failed the new client's first call with the old "connection refused" for up to the backoff)."""
    broker = InProcessBroker(tmp_path / "store")            # its address chosen, nothing serving yet
    with RmqClient(broker.address, timeout=10) as saw_it_down:
        with pytest.raises(RmqUnavailable):
            saw_it_down.list_brokers()
        broker.start()
        try:
            with RmqClient(broker.address, timeout=10) as fresh:
                assert fresh.list_brokers() == {"broker-a": broker.address}
        finally:
            broker.stop()
