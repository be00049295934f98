"""Units of the RocketMQ 5 protocol service (broker_server/rocketmq_v2): message conversion with
the fields the official clients check (spec rocketmq-v2-protocol.md §3, §4), receipt handles, the
pop-state journal, telemetry settings and the MQv2-HMAC-SHA1 signature."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import os
import threading
from pathlib import Path

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration

from rmq import message_format as mf
from rmq.broker_server.errors import InvalidReceiptHandle
from rmq.broker_server.processors.end_transaction_processor import (
    EndTransactionProcessor,
    Resolution,
    TransactionSettings,
)
from rmq.broker_server.processors.pop_state import PopQueue, PopStateTable
from rmq.broker_server.processors.receipt_handle import ReceiptHandle, ReceiptHandleCodec
from rmq.broker_server.processors.store_executor import StoreExecutor
from rmq.broker_server.processors.topic_route_processor import reachable
from rmq.broker_server.rocketmq_v2 import messages
from rmq.broker_server.rocketmq_v2.route import endpoints
from rmq.broker_server.rocketmq_v2.telemetry import ServerSettings, answer_settings
from rmq.broker_server.security.acl import parse_acl
from rmq.broker_server.security.request_auth import CallRefused
from rmq.broker_server.security.rocketmq_v2_auth import V2Authenticator, parse_authorization
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.rocketmq_v2 import METHODS, MessagingServiceStub
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from rmq.stored_message import StoredMessage
from tests.broker_server.in_process_broker import InProcessBroker
from tests.clocks import ManualClock
from tests.waiting import wait_until

HOST = bytes([10, 0, 0, 7]) + (10911).to_bytes(4, "big")


def stored(body: bytes, properties: dict[str, str], reconsume_times: int = 0) -> StoredMessage:
    return StoredMessage(queue_id=2, flag=0, queue_offset=41, physical_offset=1234, sys_flag=0,
                         born_timestamp=1_700_000_000_123, born_host=HOST, store_timestamp=1_700_000_000_456,
                         store_host=HOST, reconsume_times=reconsume_times, body=body, topic="orders",
                         properties=properties)


def test_received_message_carries_every_field_the_official_clients_check():
    message = messages.to_v2(
        stored(b"payload", {mf.PROPERTY_TAGS: "TagA", mf.PROPERTY_KEYS: "k1 k2",
                            mf.PROPERTY_UNIQ_KEY: "01ABC", "region": "eu"}),
        "orders", receipt_handle="2:41:1:orders", delivery_attempt=1, invisible_ms=30_000)
    system = message.system_properties
    assert system.body_encoding == v2.IDENTITY                      # §3.1
    assert system.body_digest.type == v2.MD5
    assert system.body_digest.checksum == hashlib.md5(b"payload").hexdigest().upper()   # §3.2
    assert system.delivery_attempt == 1                              # §3.3
    assert (system.tag, list(system.keys), system.message_id) == ("TagA", ["k1", "k2"], "01ABC")
    assert dict(message.user_properties) == {"region": "eu"}          # system ones stay system
    assert (system.queue_id, system.queue_offset, system.receipt_handle) == (2, 41, "2:41:1:orders")
    assert system.born_timestamp.ToMilliseconds() == 1_700_000_000_123
    assert system.store_host == "10.0.0.7:10911" and system.message_type == v2.NORMAL


def test_delivery_attempt_counts_reconsume_times_and_message_id_falls_back_to_the_offset_id():
    message = messages.to_v2(stored(b"x", {}, reconsume_times=2), "orders")
    assert message.system_properties.delivery_attempt == 3
    assert message.system_properties.message_id == mf.message_id(HOST, 1234)


def test_sent_message_properties_keep_the_producer_fields_and_refuse_reserved_keys():
    sent = v2.Message(topic=v2.Resource(name="orders"), body=b"b", user_properties={"a": "1"})
    sent.system_properties.message_id = "01FF"
    sent.system_properties.tag = "T"
    sent.system_properties.keys.extend(["k1", "k2"])
    sent.system_properties.message_type = v2.FIFO
    sent.system_properties.message_group = "g1"
    assert messages.record_properties(sent) == {"a": "1", "TAGS": "T", "KEYS": "k1 k2", "UNIQ_KEY": "01FF",
                                                "__SHARDINGKEY": "g1"}
    sent.user_properties["UNIQ_KEY"] = "forged"
    with pytest.raises(messages.InvalidMessage) as refused:
        messages.record_properties(sent)
    assert refused.value.code == v2.ILLEGAL_MESSAGE_PROPERTY_KEY


@pytest.mark.parametrize("seconds, expected_ms", [(1_700_000_000, 1_700_000_000_000),
                                                  (1_700_000_000_000, 1_700_000_000_000)])
def test_delivery_time_in_seconds_or_milliseconds(seconds, expected_ms):
    stamp = v2.SystemProperties().delivery_timestamp
    stamp.seconds = seconds
    assert messages.delivery_time_ms(stamp) == expected_ms


def test_receipt_handle_round_trip_and_refusals(tmp_path: Path):
    """#25 item 10: a handle is the broker's (HMAC under a secret kept in the store directory):
    one forged, edited to another generation or offset, or given to another group is refused."""
    codec = ReceiptHandleCodec.of_store(tmp_path)
    handle = ReceiptHandle("orders", 3, 17, 2)
    text = codec.encode("g", handle)
    assert codec.decode(text, "g", "orders") == handle
    assert ReceiptHandleCodec.of_store(tmp_path).decode(text, "g", "orders") == handle   # after a restart
    assert oct((tmp_path / "config" / "receiptHandle.key").stat().st_mode & 0o777) == "0o600"
    queue, offset, version, mac, _ = text.split(":")
    another_broker = ReceiptHandleCodec.of_store(tmp_path / "other").encode("g", handle)
    for refused, group, topic in (("garbage", "g", "orders"), ("3:x:2:ab:orders", "g", "orders"),
                                  (text, "g", "other"), (text, "other-group", "orders"),
                                  (f"{queue}:{offset}:3:{mac}:orders", "g", "orders"),
                                  (f"{queue}:16:{version}:{mac}:orders", "g", "orders"),
                                  (f"{queue}:{offset}:{version}:{'0' * len(mac)}:orders", "g", "orders"),
                                  (another_broker, "g", "orders")):
        with pytest.raises(InvalidReceiptHandle):
            codec.decode(refused, group, topic)


def test_pop_state_journal_replays_pops_acks_and_changes_and_ignores_a_torn_tail(tmp_path: Path):
    queue = PopQueue("g", "orders", 0)

    async def record() -> None:
        table = PopStateTable(tmp_path, StoreExecutor(1))
        table.state(queue).pop_offset = 0
        table.popped(queue, 3, [0, 1, 2], [1, 1, 1], 5000)
        table.acked(queue, [1])
        table.changed(queue, 2, 9000)
        await table.sync()

    asyncio.run(record())
    with open(tmp_path / "config" / "popState.journal", "a") as journal:
        journal.write('{"op":"ack","g":"g"')   # a write torn by a crash
    table = PopStateTable(tmp_path, StoreExecutor(1))
    table.load()
    state = table.queues[queue]
    assert state.pop_offset == 3 and sorted(state.inflight) == [0, 2]
    assert (state.inflight[2].visible_at_ms, state.inflight[2].version) == (9000, 2)
    assert state.consumer_offset() == 0


def test_pop_state_compaction_keeps_the_live_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from rmq.broker_server.processors import pop_state
    monkeypatch.setattr(pop_state, "COMPACT_AFTER_LINES", 2)
    queue = PopQueue("g", "orders", 1)

    async def record() -> None:
        table = PopStateTable(tmp_path, StoreExecutor(1))
        for offset in range(5):
            table.popped(queue, offset + 1, [offset], [1], 100)
            table.acked(queue, [offset] if offset < 4 else [])
            await table.sync()

    asyncio.run(record())
    lines = (tmp_path / "config" / "popState.journal").read_text().splitlines()
    table = PopStateTable(tmp_path, StoreExecutor(1))
    table.load()
    assert len(lines) <= 3
    assert table.queues[queue].pop_offset == 5 and list(table.queues[queue].inflight) == [4]


SETTINGS = ServerSettings(max_body_size=4 << 20, long_polling_timeout_s=20, receive_batch_size=32,
                          max_attempts=3, retry_delays_ms=[1000, 2000], fifo_groups=frozenset({"ordered"}))


def test_settings_reply_gives_producers_a_body_size_and_consumers_their_group_policy():
    producer = v2.Settings(client_type=v2.PRODUCER, publishing=v2.Publishing(), metric=v2.Metric(on=True))
    reply = answer_settings(producer, SETTINGS)
    assert reply.publishing.max_body_size == 4 << 20 and not reply.metric.on   # §2: never 0, metric off
    consumer = v2.Settings(client_type=v2.PUSH_CONSUMER,
                           subscription=v2.Subscription(group=v2.Resource(name="ordered")))
    reply = answer_settings(consumer, SETTINGS)
    assert reply.subscription.fifo and reply.subscription.long_polling_timeout.seconds == 20
    assert reply.backoff_policy.max_attempts == 3
    assert [d.seconds for d in reply.backoff_policy.customized_backoff.next] == [1, 2]


ACL = parse_acl({"accounts": [
    {"accessKey": "producer1", "secretKey": "producer-secret", "topicPerms": ["orders=PUB"]},
]}, "test acl")


def signed(secret: str, upper: bool = False) -> dict[str, str]:
    date = "20261122T235959Z"
    digest = hmac.new(secret.encode(), date.encode(), hashlib.sha1).hexdigest()
    return {"x-mq-date-time": date, "authorization": f"MQv2-HMAC-SHA1 Credential=producer1, "
                                                      f"SignedHeaders=x-mq-date-time, "
                                                      f"Signature={digest.upper() if upper else digest}"}


def test_mqv2_signature_in_either_hex_case_admits_and_permissions_apply():
    authenticator = V2Authenticator(lambda: ACL)
    assert authenticator.authenticate(signed("producer-secret")) == "producer1"            # Python client
    assert authenticator.authenticate(signed("producer-secret", upper=True)) == "producer1"  # Java client
    with pytest.raises(CallRefused) as wrong:
        authenticator.authenticate(signed("not-the-secret"))
    assert wrong.value.code == grpc.StatusCode.UNAUTHENTICATED   # answered as v2 UNAUTHORIZED
    send = pb.SendMessageRequest(messages=[v2.Message(topic=v2.Resource(name="orders"))])
    authenticator.authorize("producer1", "SendMessage", send, "ipv4:127.0.0.1:5000")
    receive = pb.ReceiveMessageRequest(group=v2.Resource(name="g"),
                                       message_queue=v2.MessageQueue(topic=v2.Resource(name="orders")))
    with pytest.raises(CallRefused) as denied:
        authenticator.authorize("producer1", "ReceiveMessage", receive, "ipv4:127.0.0.1:5000")
    assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED and "lacks SUB" in denied.value.message
    assert parse_authorization(signed("s")["authorization"])[0] == "producer1"


def test_method_table_serves_the_official_paths():
    assert METHODS["ReceiveMessage"].path == "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
    assert METHODS["ReceiveMessage"].server_streaming and not METHODS["ReceiveMessage"].client_streaming
    assert METHODS["Telemetry"].client_streaming and METHODS["Telemetry"].server_streaming


def test_route_endpoint_of_a_broker_listening_on_every_interface_is_where_the_client_reached_it():
    assert reachable("0.0.0.0:10911", "10.1.2.3") == "10.1.2.3:10911"
    assert reachable("192.168.0.5:10911", "10.1.2.3") == "192.168.0.5:10911"   # advertised: kept
    assert endpoints("broker-a.example:10911").scheme == v2.DOMAIN_NAME
    assert endpoints("127.0.0.1:10911").addresses[0].port == 10911


def test_auto_renewed_deliveries_stay_invisible_while_their_client_is_connected(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Proxy ReceiptHandleProcessor: a push consumer's deliveries (auto_renew) are renewed while its
    Telemetry stream is open; a client that went away without a word gets nothing renewed; one
    that says NotifyClientTermination hands its deliveries back at once."""
    from rmq.broker_server.processors import pop_message_processor
    monkeypatch.setattr(pop_message_processor, "DEFAULT_INVISIBLE_MS", 1500)
    monkeypatch.setattr(pop_message_processor, "RENEW_INTERVAL_S", 0.05)
    monkeypatch.setattr(pop_message_processor, "RENEW_AHEAD_MS", 1000)
    clock = ManualClock()     # the test moves the broker's time: no invisibility is waited out
    broker = InProcessBroker(tmp_path, clock=clock).start()
    try:
        with RmqClient(broker.address) as client:
            client.create_topic("renewed", queues=1)
            client.send("renewed", [OutgoingMessage(b"kept"), OutgoingMessage(b"dropped")])
        with grpc.insecure_channel(broker.address) as channel:
            stub = MessagingServiceStub(channel)
            closed = threading.Event()

            def commands():
                yield pb.TelemetryCommand(settings=v2.Settings(client_type=v2.PUSH_CONSUMER))
                closed.wait(30)

            telemetry = stub.Telemetry(commands(), metadata=(("x-mq-client-id", "connected"),))
            assert next(telemetry).status.code == v2.OK

            def receive(client_id: str, auto_renew: bool = True) -> list:
                request = pb.ReceiveMessageRequest(
                    group=v2.Resource(name="g"), batch_size=1, auto_renew=auto_renew,
                    message_queue=v2.MessageQueue(topic=v2.Resource(name="renewed"), id=-1),
                    long_polling_timeout=Duration(seconds=0))
                return [(r.message.body, r.message.system_properties.delivery_attempt)
                        for r in stub.ReceiveMessage(request, metadata=(("x-mq-client-id", client_id),),
                                                     timeout=5) if r.HasField("message")]

            assert receive("connected") == [(b"kept", 1)]
            assert receive("gone") == [(b"dropped", 1)]   # no Telemetry stream: not renewed
            in_flight = broker.controller.processors.pop.table.queues[PopQueue("g", "renewed", 0)].inflight
            first_visible_at = in_flight[0].visible_at_ms
            clock.advance(1.0)   # 0.5 s of invisibility left, less than RENEW_AHEAD_MS
            wait_until(lambda: in_flight[0].visible_at_ms > first_visible_at, "the connected client's "
                       "delivery renewed", timeout=10)
            clock.advance(1.0)   # past the first invisibility of both
            assert receive("other", auto_renew=False) == [(b"dropped", 2)]
            assert receive("other", auto_renew=False) == []   # "kept" is still renewed
            stub.NotifyClientTermination(pb.NotifyClientTerminationRequest(),
                                         metadata=(("x-mq-client-id", "connected"),), timeout=5)
            assert receive("other", auto_renew=False) == [(b"kept", 2)]
            closed.set()
            telemetry.cancel()
    finally:
        broker.stop()


def test_open_transactions_are_journaled_concurrent_opens_share_a_sync_and_a_restart_keeps_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """#25 weaknesses: transactions.json was rewritten and fsynced per opened transaction (3,600
    opens slowed other tenants' sends); now each open is a journal line, concurrent opens are
    written together, and the journal rebuilds the table."""
    syncs: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (syncs.append(fd), real_fsync(fd))[1])
    executor = StoreExecutor(1)

    async def open_fifty() -> list[str]:
        service = EndTransactionProcessor(None, executor, None, tmp_path, TransactionSettings())
        ids = await asyncio.gather(*(service.opened("orders", f"M{n}", n, {}) for n in range(50)))
        await service.end(ids[0], "M0", Resolution.ROLLBACK)
        return ids

    try:
        ids = asyncio.run(open_fifty())
        assert len(syncs) <= 5, f"{len(syncs)} fsyncs for 50 concurrent opens and one end"
        restarted = EndTransactionProcessor(None, executor, None, tmp_path, TransactionSettings())
        restarted.load()
        assert sorted(restarted.open) == sorted(ids[1:])
        assert (restarted.open[ids[7]].message_id, restarted.open[ids[7]].half_offset) == ("M7", 7)
    finally:
        executor.shutdown()


def test_open_transactions_of_an_earlier_release_are_moved_into_the_journal(tmp_path: Path):
    (tmp_path / "config").mkdir()
    earlier = {"open": {"T1": {"topic": "orders", "message_id": "M1", "half_offset": 4, "check_after_ms": 5}}}
    (tmp_path / "config" / "transactions.json").write_text(json.dumps(earlier))
    for _ in range(2):   # the move, then a restart from the journal alone
        service = EndTransactionProcessor(None, None, None, tmp_path, TransactionSettings())
        service.load()
        assert list(service.open) == ["T1"] and service.open["T1"].half_offset == 4
        assert not (tmp_path / "config" / "transactions.json").exists()


def test_a_check_journaled_after_its_transaction_ended_does_not_stop_the_replay(tmp_path: Path):
    """check_due runs beside EndTransaction: a check line may follow its transaction's end (and
    a line about a transaction already gone is skipped, whatever it says)."""
    fields = {"topic": "orders", "message_id": "M", "half_offset": 0, "check_after_ms": 5}
    lines = [{"op": "open", "id": "A", "t": fields}, {"op": "end", "id": "A"},
             {"op": "check", "id": "A", "times": 1, "after": 9}, {"op": "end", "id": "A"},
             {"op": "open", "id": "B", "t": fields}]
    (tmp_path / "config").mkdir()
    journal = tmp_path / "config" / "transactions.journal"
    journal.write_text("".join(json.dumps(line) + "\n" for line in lines))
    service = EndTransactionProcessor(None, None, None, tmp_path, TransactionSettings())
    service.load()
    assert list(service.open) == ["B"]
