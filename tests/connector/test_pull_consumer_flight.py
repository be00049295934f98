"""PullConsumer over both transports (connector/flight_pull.py, docs/data-plane.md "The
PullConsumer"): a backlog read through the broker's Flight data plane hands out the same messages
at the same offsets, with the same filters, refusals, removed entries and commits as PullMessage;
`transport` flight needs a data plane, auto falls back without one."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from rmq.connector.client import PERM_READ, PERM_WRITE, MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.errors import RmqReadError
from rmq.connector.message import MessageExt
from rmq.connector.pull_consumer import PullConsumer
from rmq.connector.transport import Transport
from rmq.subscription import MessageSelector
from tests.broker_server.in_process_broker import InProcessBroker
from tests.connector.test_partition_reader_removing import SMALL_FILES, delete_commit_log_files_only
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

PER_QUEUE = 700     # several Flight reads (256 rows each) per queue after the first pull of 32
TRANSPORTS = [Transport.GRPC, Transport.FLIGHT, Transport.AUTO]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessBroker]:
    broker = InProcessBroker(tmp_path_factory.mktemp("pull-flight") / "store").start()
    with RmqClient(broker.address) as client:
        client.create_topic("Mixed", 2)
        for queue_id in range(2):
            client.send("Mixed", [
                OutgoingMessage(b"%d-%d" % (queue_id, i), tags="TagA" if i % 3 else "TagB", keys=f"k{i}",
                                properties={"amount": str(i)}, queue_id=queue_id)
                for i in range(PER_QUEUE)])
    yield broker
    broker.stop()


def read_all(consumer: PullConsumer, count: int) -> list[MessageExt]:
    """`count` messages, each poll handing out at most pull_batch_size (a Flight read holds more)."""
    got: list[MessageExt] = []
    sizes: list[int] = []

    def poll() -> bool:
        batch = consumer.poll(0.2)
        got.extend(batch)
        sizes.append(len(batch))
        return len(got) >= count

    wait_until(poll, lambda: f"read {len(got)} of {count} messages", timeout=60)
    assert consumer.poll(0.2) == []
    assert max(sizes) <= consumer.config.pull_batch_size
    return got


def seen(messages: list[MessageExt]) -> list[tuple[object, ...]]:
    """Everything a listener can read of each message, in queue order."""
    return sorted((m.message_queue, m.queue_offset, m.topic, m.body, m.tags, m.keys, m.properties, m.msg_id,
                   m.commit_log_offset, m.store_size, m.reconsume_times, m.born_timestamp, m.store_timestamp)
                  for m in messages)


def consume(broker: InProcessBroker, transport: Transport, expression: str | MessageSelector, count: int,
            group: str) -> tuple[list[MessageExt], dict[MessageQueue, int], dict[Transport, int]]:
    """A fresh group member reading "Mixed" from the first offset: the messages, the offsets it
    committed and its reads by transport."""
    consumer = PullConsumer(f"{group}-{transport.value}", broker.address, consume_from="first",
                            transport=transport, auto_commit=False)
    consumer.subscribe("Mixed", expression)
    with consumer:
        got = read_all(consumer, count)
        consumer.commit()
        committed = {mq: consumer.committed(mq) for mq in consumer.assignment()}
        return got, committed, consumer.transport_reads


@pytest.mark.parametrize("group, expression, count", [
    ("all", "*", 2 * PER_QUEUE),
    ("tag", "TagB", 2 * len(range(0, PER_QUEUE, 3))),
    ("sql92", MessageSelector.by_sql("amount >= 300"), 2 * 400),
])
def test_both_transports_hand_out_the_same_messages_offsets_and_commits(
        broker: InProcessBroker, group: str, expression: str | MessageSelector, count: int) -> None:
    runs = {transport: consume(broker, transport, expression, count, group) for transport in TRANSPORTS}
    grpc_messages, grpc_committed, grpc_reads = runs[Transport.GRPC]
    assert len(grpc_messages) == count and set(grpc_reads) == {Transport.GRPC}
    assert set(grpc_committed.values()) == {PER_QUEUE}   # past the filtered-out tail too
    for transport in (Transport.FLIGHT, Transport.AUTO):
        messages, committed, reads = runs[transport]
        assert seen(messages) == seen(grpc_messages), transport
        assert committed == grpc_committed, transport
        assert reads.get(Transport.FLIGHT, 0) > 0, f"{transport} read no batch through Flight: {reads}"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_refused_read_is_retried_and_never_hands_out_a_message(broker: InProcessBroker, caplog,
                                                                  transport: Transport) -> None:
    """A topic made unreadable (perm write-only) while its queue is paused: the reads are refused
    on both transports (NO_PERMISSION, PullMessage's refusal, retried as RocketMQ's clients do);
    readable again, every message is read."""
    topic = f"Unreadable-{transport.value}"
    with RmqClient(broker.address) as client:
        client.create_topic(topic, 1)
        client.send(topic, [OutgoingMessage(b"m%d" % i) for i in range(300)])
        [mq] = client.query_route(topic).message_queues
        consumer = PullConsumer(f"refused-{transport.value}", broker.address, consume_from="first",
                                transport=transport, auto_commit=False)
        consumer.assign([mq])
        consumer.pause([mq])
        with consumer, caplog.at_level(logging.WARNING):
            client.update_topic(topic, 1, perm=PERM_WRITE)
            consumer.resume([mq])
            wait_until(lambda: "NO_PERMISSION" in caplog.text, lambda: f"no refusal logged: {caplog.text}")
            assert consumer.poll(0.2) == []
            client.update_topic(topic, 1, perm=PERM_READ | PERM_WRITE)   # readable again
            assert [m.body for m in read_all(consumer, 300)] == [b"m%d" % i for i in range(300)]
    if transport is Transport.FLIGHT:
        assert "Flight data plane" in caplog.text   # the refusal came from the Flight listener


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_entries_whose_commit_log_file_was_deleted_are_skipped_alike(tmp_path: Path,
                                                                      transport: Transport) -> None:
    """Retention removed the CommitLog files under most of a queue: both transports skip the same
    removed entries (MESSAGE_WAS_REMOVING) and hand out the same kept ones."""
    broker = InProcessBroker(tmp_path / "store", store=SMALL_FILES).start()
    try:
        with RmqClient(broker.address) as client:
            client.create_topic("Removing", queues=1)
            for start in range(0, 1000, 100):
                client.send("Removing", [OutgoingMessage(b"m-%04d." % n * 20)
                                         for n in range(start, start + 100)])
            [mq] = client.query_route("Removing").message_queues
        kept_from = delete_commit_log_files_only(broker)
        consumer = PullConsumer(f"removing-{transport.value}", broker.address, transport=transport,
                                auto_commit=False)
        consumer.assign([mq])
        with consumer:
            consumer.seek(mq, 0)
            got: list[MessageExt] = []
            wait_until(lambda: got.extend(consumer.poll(0.2)) or (bool(got) and got[-1].queue_offset == 999),
                       lambda: f"read up to {got[-1].queue_offset if got else None}", timeout=60)
            consumer.commit()
            assert consumer.committed(mq) == 1000
    finally:
        broker.stop()
    offsets = [m.queue_offset for m in got]
    assert offsets == list(range(offsets[0], 1000)) and offsets[0] > 0
    assert all(m.commit_log_offset >= kept_from for m in got)
    assert [m.body for m in got] == [b"m-%04d." % n * 20 for n in offsets]


def test_transport_flight_needs_a_data_plane_and_auto_falls_back(tmp_path: Path) -> None:
    broker = InProcessBroker(tmp_path / "store", flight_listen="off").start()
    try:
        with RmqClient(broker.address) as client:
            client.create_topic("Plain", 1)
            client.send("Plain", [OutgoingMessage(b"m%d" % i) for i in range(600)])
        forced = PullConsumer("no-plane-flight", broker.address, consume_from="first", transport="flight")
        forced.subscribe("Plain")
        with forced:
            wait_until(lambda: forced.failure is not None, "the consumer to give up reading")
            with pytest.raises(RmqReadError, match="transport=flight, but broker broker-a advertises no "
                                                   "Arrow Flight data plane"):
                forced.poll(0.1)
        auto = PullConsumer("no-plane-auto", broker.address, consume_from="first")
        auto.subscribe("Plain")
        with auto:
            assert len(read_all(auto, 600)) == 600
            assert set(auto.transport_reads) == {Transport.GRPC}
    finally:
        broker.stop()
    with pytest.raises(ValueError, match="transport must be one of auto, flight, grpc, not 'udp'"):
        PullConsumer("bad-transport", "127.0.0.1:1", transport="udp")
