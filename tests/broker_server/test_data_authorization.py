"""Authorization follows the data a request touches, not only the names it carries
(docs/security-model.md): an in-process `--acl` broker (tests/broker_server/acl_broker.py) and
accounts that may consume `orders` in group `g`, publish it, or nothing at all."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from rmq.broker_server.processors.end_transaction_processor import HALF_TOPIC
from rmq.broker_server.processors.names import SCHEDULE_TOPIC
from rmq.connector.client import OutgoingMessage
from rmq.connector.errors import RmqError
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.v1 import rmq_pb2
from tests.acl_files import write_acl
from tests.broker_server.acl_broker import ACL_TEXT, acl_broker, client
from tests.broker_server.in_process_broker import InProcessBroker
from tests.broker_server.v2_calls import TelemetryStream, V2Client, publishing

RETRY_LEVEL_3_QUEUE = 2    # a first send-back waits at delay level 3: schedule queue 2


def commit_log_offset(msg_id: str) -> int:
    return int(msg_id[-16:], 16)   # an offset message id ends with the record's CommitLog offset


def test_send_back_refuses_the_offset_of_a_record_in_a_topic_the_caller_may_not_consume(tmp_path: Path):
    """#25 item 1: SUB on the group is not SUB on whatever topic the offset points into."""
    broker = acl_broker(tmp_path)
    try:
        with client(broker, "admin1") as admin:
            admin.create_topic("orders", queues=1)
            admin.create_topic("secret", queues=1)
        with client(broker, "producer") as producer:
            secret = producer.send("secret", [OutgoingMessage(b"classified")]).msg_ids[0]
            order = producer.send("orders", [OutgoingMessage(b"order")]).msg_ids[0]
        name = broker.config.broker_name
        with client(broker, "consumer") as consumer:
            consumer.heartbeat("consumer-1", "g", {"orders": "*"})
            with pytest.raises(RmqError) as refused:
                consumer.send_message_back("g", name, commit_log_offset(secret))
            assert refused.value.code == rmq_pb2.NO_PERMISSION
            assert "secret" not in refused.value.message and "classified" not in refused.value.message
            assert consumer.send_message_back("g", name, commit_log_offset(order)).topic == "%RETRY%g"
        assert broker.controller.store.get_max_offset_in_queue(SCHEDULE_TOPIC, RETRY_LEVEL_3_QUEUE) == 1
    finally:
        broker.stop()


def produce_orders(broker: InProcessBroker, count: int) -> None:
    with client(broker, "admin1") as admin:
        admin.create_topic("orders", queues=1)
    with client(broker, "producer") as producer:
        producer.send("orders", [OutgoingMessage(b"order-%d" % n) for n in range(count)])


def test_consumer_rpcs_need_sub_and_a_refused_one_leaves_the_delivery_in_flight(tmp_path: Path):
    """#26 item 2: AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue and
    UpdateOffset from an account without SUB (the producer, holding the consumer's handle)
    are refused; the message stays the consumer's and comes back when its invisibility ends."""
    broker = acl_broker(tmp_path)
    try:
        produce_orders(broker, 1)
        with grpc.insecure_channel(broker.address) as channel:
            consumer = V2Client(channel, "consumer-1", "consumer")
            producer = V2Client(channel, "producer-1", "producer")
            [message] = consumer.receive("g", "orders", wait_ms=5_000)
            assert producer.ack("g", message) == v2.FORBIDDEN
            assert producer.change_invisible("g", message, 0).status.code == v2.FORBIDDEN
            assert producer.forward_to_dlq("g", message) == v2.FORBIDDEN
            assert producer.update_offset("g", message, 1) == v2.FORBIDDEN
            assert consumer.receive("g", "orders") == []    # still invisible: nothing was acknowledged
            assert consumer.change_invisible("g", message, 0).status.code == v2.OK   # its invisibility ends
            [again] = consumer.receive("g", "orders")
            assert (again.body, again.system_properties.delivery_attempt) == (b"order-0", 2)
        assert broker.controller.topics.get("%DLQ%g") is None
    finally:
        broker.stop()


def test_a_client_id_belongs_to_its_account_so_another_cannot_end_its_session(tmp_path: Path):
    """#25 item 8: NotifyClientTermination naming another account's client id is refused, and
    that client's auto-renewed deliveries stay in flight."""
    broker = acl_broker(tmp_path)
    try:
        produce_orders(broker, 1)
        with grpc.insecure_channel(broker.address) as channel:
            consumer = V2Client(channel, "consumer-1", "consumer")
            impostor = V2Client(channel, "consumer-1", "prying")   # SUB on g too, another account
            [held] = consumer.receive("g", "orders", auto_renew=True, wait_ms=5_000)
            assert impostor.notify_termination("g") == v2.FORBIDDEN
            assert impostor.heartbeat("g") == v2.FORBIDDEN
            assert V2Client(channel, "prying-1", "prying").receive("g", "orders") == []
            assert consumer.ack("g", held) == v2.OK
            assert consumer.notify_termination("g") == v2.OK
    finally:
        broker.stop()


def create_orders(broker: InProcessBroker) -> None:
    with client(broker, "admin1") as admin:
        admin.create_topic("orders", queues=1)


def test_a_transaction_is_resolved_and_ended_only_by_the_account_that_opened_it(tmp_path: Path):
    """#25 item 2: settings claim only what the account holds; the owner's producers alone are
    asked to resolve its open transaction; another account, even one with PUB on the topic,
    cannot end it, and the owner needs PUB on the transaction's own topic whatever it names."""
    broker = acl_broker(tmp_path, transaction_timeout_ms=200, transaction_check_interval_ms=200)
    streams: list[TelemetryStream] = []
    try:
        create_orders(broker)
        with grpc.insecure_channel(broker.address) as channel:
            producer, prying, stranger = (V2Client(channel, f"{name}-1", name)
                                          for name in ("producer", "prying", "stranger"))
            claimed, owners, other = (TelemetryStream(c, publishing("orders"))
                                      for c in (stranger, producer, prying))
            streams += [claimed, owners, other]
            assert claimed.next().status.code == v2.FORBIDDEN   # no PUB on orders
            assert owners.next().status.code == other.next().status.code == v2.OK
            [opened] = producer.send_transaction("orders", b"pending", "MSG-1").entries
            transaction_id = opened.transaction_id
            for _ in range(2):   # two checks, both to the owner's producer
                command = owners.next()
                assert command.recover_orphaned_transaction_command.transaction_id == transaction_id
                assert command.recover_orphaned_transaction_command.message.body == b"pending"
            assert other.commands.empty() and claimed.commands.empty()
            assert stranger.end_transaction("", "MSG-1", transaction_id) == v2.FORBIDDEN
            assert prying.end_transaction("orders", "MSG-1", transaction_id) == v2.FORBIDDEN
            assert producer.end_transaction("orders", "MSG-1", transaction_id) == v2.OK
            consumer = V2Client(channel, "consumer-1", "consumer")
            assert [m.body for m in consumer.receive("g", "orders", wait_ms=5_000)] == [b"pending"]

            second = producer.send_transaction("orders", b"later", "MSG-2").entries[0].transaction_id
            revoke_publishing(broker, tmp_path)
            assert producer.end_transaction("", "MSG-2", second) == v2.FORBIDDEN   # its own topic counts
    finally:
        for stream in streams:
            stream.close()
        broker.stop()


def revoke_publishing(broker: InProcessBroker, tmp_path: Path) -> None:
    """The producer account loses PUB on orders (an ACL reload)."""
    write_acl(tmp_path / "acl.yml", ACL_TEXT.replace('"orders=PUB", "secret=PUB"', '"secret=PUB"'))
    assert broker.controller.security.acl_file.reload()


def test_one_account_holds_at_most_its_share_of_telemetry_sessions(tmp_path: Path):
    """#25 weaknesses: a no-permission account opened ~7,800 sessions; now it gets its share."""
    broker = acl_broker(tmp_path, max_telemetry_sessions=3, max_telemetry_sessions_per_account=2)
    streams: list[TelemetryStream] = []
    try:
        with grpc.insecure_channel(broker.address) as channel:
            def open_session(account: str, number: int) -> int:
                session = TelemetryStream(V2Client(channel, f"{account}-{number}", account), publishing())
                streams.append(session)
                return streams[-1].next().status.code

            assert [open_session("stranger", n) for n in range(3)] == [v2.OK, v2.OK, v2.TOO_MANY_REQUESTS]
            assert open_session("producer", 0) == v2.OK
            assert open_session("consumer", 0) == v2.TOO_MANY_REQUESTS   # the broker's 3 are taken
    finally:
        for stream in streams:
            stream.close()
        broker.stop()


def test_one_account_holds_at_most_its_share_of_open_transactions(tmp_path: Path):
    """Open transactions are held (and checked back) by the broker: each account gets a share,
    and a refused send stores no half message."""
    broker = acl_broker(tmp_path, max_open_transactions=3, max_open_transactions_per_account=2)
    try:
        create_orders(broker)
        with grpc.insecure_channel(broker.address) as channel:
            def open_transaction(account: str, number: int) -> int:
                sender = V2Client(channel, f"{account}-1", account)
                return sender.send_transaction("orders", b"t", f"{account}-{number}").status.code

            assert [open_transaction("producer", n) for n in range(3)] == [v2.OK, v2.OK, v2.TOO_MANY_REQUESTS]
            assert [open_transaction("prying", n) for n in range(2)] == [v2.OK, v2.TOO_MANY_REQUESTS]
        assert broker.controller.store.get_max_offset_in_queue(HALF_TOPIC, 0) == 3
    finally:
        broker.stop()
