"""What a RocketMQ 5 client was told stays true across a broker crash (#26 items 1 and 7), on a
real `rmq broker` process: an acknowledged message is never delivered again after kill -9, and
an open transaction survives SIGTERM and kill -9, to be ended by its producer or resolved by
another producer's checker once its own producer is gone."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from testing import processes
from tests.broker_server.v2_calls import TelemetryStream, V2Client, publishing

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]
INVISIBLE_WAIT_MS = 15_000   # a receive held past the 10 s invisibility of the first one


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[processes.ServerProcess]:
    config = tmp_path / "broker.yaml"
    config.write_text("transaction_timeout_ms: 500\ntransaction_check_interval_ms: 500\n"
                      "transaction_check_max: 1000\n")
    server = processes.broker(tmp_path, extra=["--config", str(config)]).start()
    with RmqClient(server.address) as client:
        client.create_topic("orders", queues=1)
    yield server
    server.stop()


def test_acknowledged_messages_are_not_delivered_again_after_kill_9(broker: processes.ServerProcess):
    """#26 item 1: acks are fsynced before they are answered. Receive 20, acknowledge 19, kill -9
    at once; after the restart the unacknowledged one comes back when its invisibility ends,
    and nothing else ever does."""
    with RmqClient(broker.address) as client:
        client.send("orders", [OutgoingMessage(b"m%02d" % n) for n in range(20)])
    with grpc.insecure_channel(broker.address) as channel:
        consumer = V2Client(channel, "consumer-1")
        received: list[v2.Message] = []
        deadline = time.monotonic() + 30
        while len(received) < 20 and time.monotonic() < deadline:   # as the ConsumeQueue catches up
            received += consumer.receive("g", "orders", wait_ms=5_000)
        assert len(received) == 20
        for message in received[:-1]:
            assert consumer.ack("g", message) == v2.OK
    broker.kill()
    broker.start()
    with grpc.insecure_channel(broker.address) as channel:
        consumer = V2Client(channel, "consumer-2")
        back: list[v2.Message] = []
        deadline = time.monotonic() + 60
        while not back and time.monotonic() < deadline:
            back = consumer.receive("g", "orders", wait_ms=INVISIBLE_WAIT_MS)
        back += consumer.receive("g", "orders")
        assert [(m.body, m.system_properties.delivery_attempt) for m in back] == [(received[-1].body, 2)]


def recover_command(stream: TelemetryStream, deadline_s: float = 30) -> pb.RecoverOrphanedTransactionCommand:
    """The first transaction check written to the stream (settings answers skipped)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        command = stream.next(deadline - time.monotonic())
        if command.HasField("recover_orphaned_transaction_command"):
            return command.recover_orphaned_transaction_command
    raise AssertionError("no transaction check reached the producer")


def test_open_transactions_survive_sigterm_and_kill_9_and_a_checker_resolves_an_orphan(
        broker: processes.ServerProcess):
    """#26 item 7: EndTransaction COMMIT with the id given before a restart answers OK and the
    message becomes receivable; a transaction whose producer died is put to another producer
    of the topic (same account), whose checker commits it."""
    def open_transactions(channel: grpc.Channel) -> dict[bytes, str]:
        producer = V2Client(channel, "producer-1")
        return {body: producer.send_transaction("orders", body, body.decode()).entries[0].transaction_id
                for body in (b"after-sigterm", b"after-kill", b"orphan")}

    def commit(channel: grpc.Channel, body: bytes, transaction_id: str) -> list[bytes]:
        producer = V2Client(channel, "producer-1")
        assert producer.end_transaction("orders", body.decode(), transaction_id) == v2.OK
        return [m.body for m in V2Client(channel, "consumer-1").receive("g", "orders", wait_ms=5_000)]

    with grpc.insecure_channel(broker.address) as channel:
        transactions = open_transactions(channel)
    broker.stop()
    broker.start()
    with grpc.insecure_channel(broker.address) as channel:
        assert commit(channel, b"after-sigterm", transactions[b"after-sigterm"]) == [b"after-sigterm"]
    broker.kill()
    broker.start()
    with grpc.insecure_channel(broker.address) as channel:
        assert commit(channel, b"after-kill", transactions[b"after-kill"]) == [b"after-kill"]
        checker = TelemetryStream(V2Client(channel, "producer-2"), publishing("orders"))
        try:
            check = recover_command(checker)
            assert (check.transaction_id, check.message.body) == (transactions[b"orphan"], b"orphan")
            assert commit(channel, b"orphan", check.transaction_id) == [b"orphan"]
        finally:
            checker.close()
