"""A whole broker (in this process, over gRPC) with short timers: silent clients leave the
consumer list after the client expiry, queue locks expire unless renewed, and delay levels
deliver after their delay."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from rmq import message_format as mf
from rmq.v1 import rmq_pb2
from tests.broker_server.in_process_broker import running_broker
from tests.rmq_stubs import Stubs, decode, suspend_fields
from tests.waiting import wait_until

SHORT_TIMERS = {
    "client_expiry_ms": 1000,
    "client_scan_interval_ms": 200,
    "rebalance_lock_max_live_time_ms": 1000,
    "message_delay_level": "1s 2s",
}


@pytest.fixture(scope="module")
def short_timers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stubs]:
    """A broker whose expiries and delay levels take about a second."""
    with running_broker(tmp_path_factory.mktemp("short-timers"), flush="sync", **SHORT_TIMERS) as broker:
        stubs = Stubs.connect(broker.address)
        yield stubs
        stubs.close()


def consumer_list(rmq: Stubs, group: str) -> list[str]:
    return list(
        rmq.messaging.GetConsumerList(rmq_pb2.GetConsumerListRequest(consumer_group=group)).client_ids
    )


def heartbeat(rmq: Stubs, client_id: str, group: str = "members") -> None:
    request = rmq_pb2.HeartbeatRequest(
        client_id=client_id,
        consumer_group=group,
        subscriptions=[rmq_pb2.Subscription(topic="t", sub_expression="*")],
    )
    assert rmq.messaging.Heartbeat(request).status.code == rmq_pb2.OK


def test_membership_expires_silent_clients(short_timers: Stubs) -> None:
    rmq = short_timers
    heartbeat(rmq, "client-b")
    heartbeat(rmq, "client-a")
    assert consumer_list(rmq, "members") == ["client-a", "client-b"]
    silent_since = time.monotonic()

    def only_the_beating_client_left() -> bool:
        heartbeat(rmq, "client-b")   # client-b keeps beating (every poll), client-a falls silent
        return consumer_list(rmq, "members") == ["client-b"]

    wait_until(only_the_beating_client_left, "the silent client-a expired", interval=0.2)
    assert time.monotonic() - silent_since >= 0.9   # not before its 1 s expiry
    unregister = rmq_pb2.UnregisterClientRequest(client_id="client-b", consumer_group="members")
    assert rmq.messaging.UnregisterClient(unregister).status.code == rmq_pb2.OK
    assert consumer_list(rmq, "members") == []


def test_queue_locks_expire_and_renew(short_timers: Stubs) -> None:
    rmq = short_timers
    rmq.create_topic("ordered", queues=1)      # only existing queues can be locked
    mq = rmq_pb2.MessageQueue(topic="ordered", broker_name="broker-a", queue_id=0)

    def lock(client_id: str) -> bool:
        request = rmq_pb2.LockBatchRequest(consumer_group="lockers", client_id=client_id, queues=[mq])
        response = rmq.messaging.LockBatchMQ(request)
        assert response.status.code == rmq_pb2.OK
        return list(response.locked_queues) == [mq]

    assert lock("A")
    for _ in range(4):   # the last B attempt comes 1.2 s after the first lock: the renewals kept it
        time.sleep(0.3)   # the behaviour under test: the holder renews its lock, well within the 1 s lifetime
        assert not lock("B")
        assert lock("A")
    renewed_at = time.monotonic()
    wait_until(lambda: lock("B"), "A's lock expired once A fell silent", interval=0.1)
    assert time.monotonic() - renewed_at >= 0.9   # not before its 1 s lifetime
    unlock = rmq_pb2.UnlockBatchRequest(consumer_group="lockers", client_id="B", queues=[mq])
    assert rmq.messaging.UnlockBatchMQ(unlock).status.code == rmq_pb2.OK
    assert lock("A")


def test_delay_levels_deliver_after_their_delay(short_timers: Stubs) -> None:
    rmq = short_timers
    rmq.create_topic("later", queues=2)
    sent_ms = int(time.time() * 1000)
    sent = rmq.send(
        "later",
        rmq_pb2.Message(body=b"one second", queue_id=1, delay_level=1, tags="TagA"),
        rmq_pb2.Message(body=b"two seconds", queue_id=1, delay_level=2),
        rmq_pb2.Message(body=b"capped at two", queue_id=1, delay_level=9),
    )
    assert sent.status.code == rmq_pb2.OK
    assert list(sent.queue_ids) == [1, 1, 1] and list(sent.queue_offsets) == [-1, -1, -1]
    assert rmq.pull("later", 1, 0).pull_status == rmq_pb2.NO_NEW_MSG  # not visible yet

    first = rmq.pull("later", 1, 0, **suspend_fields(10000))
    [early] = decode(first)
    assert early.body == b"one second" and early.store_timestamp >= sent_ms + 1000
    assert early.properties[mf.PROPERTY_TAGS] == "TagA"
    assert early.properties[mf.PROPERTY_REAL_TOPIC] == "later"
    assert mf.PROPERTY_DELAY_TIME_LEVEL not in early.properties
    rest = []
    while len(rest) < 2:
        response = rmq.pull("later", 1, first.next_begin_offset + len(rest), **suspend_fields(10000))
        rest += decode(response)
    assert sorted(m.body for m in rest) == [b"capped at two", b"two seconds"]
    assert all(m.store_timestamp >= sent_ms + 2000 for m in rest)
    assert all(m.topic == "later" and m.queue_id == 1 for m in rest)
