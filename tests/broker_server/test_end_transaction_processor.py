"""The broker's one EndTransactionProcessor (issue 42): protocol-neutral refusals each edge
translates, and an open transaction checked with whichever protocol's producer is connected."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import grpc
import pytest

from rmq.broker_server.errors import BrokerError, UnknownTransaction
from rmq.broker_server.processors.end_transaction_processor import (
    HALF_TOPIC,
    EndTransactionProcessor,
    Resolution,
    TransactionSettings,
)
from rmq.broker_server.rocketmq_v2.status import v2_status
from rmq.remoting.request_code import RequestCode, ResponseCode
from rmq.rocketmq_v2 import definition_pb2 as v2
from rmq.rocketmq_v2 import service_pb2 as pb
from tests.broker_server.remoting_client import RemotingTestClient
from tests.broker_server.test_remoting_broker import (
    TOPIC,
    end_transaction,
    prepared,
    request,
    send_v2,
    start_broker,
)
from tests.broker_server.v2_calls import TelemetryStream, V2Client, publishing


def test_ending_an_unknown_transaction_is_a_broker_error_each_edge_answers_its_way(tmp_path: Path) -> None:
    service = EndTransactionProcessor(None, None, None, tmp_path, TransactionSettings())
    with pytest.raises(UnknownTransaction) as raised:
        asyncio.run(service.end("nope", "M", Resolution.COMMIT))
    assert isinstance(raised.value, BrokerError) and "unknown or already ended" in raised.value.message
    assert v2_status(raised.value).code == v2.INVALID_TRANSACTION_ID


def recover_command(stream: TelemetryStream) -> pb.RecoverOrphanedTransactionCommand:
    while True:   # settings answers first
        command = stream.next()
        if command.HasField("recover_orphaned_transaction_command"):
            return command.recover_orphaned_transaction_command


def test_a_4x_transaction_without_its_4x_producer_is_checked_with_a_rocketmq5_producer(
        tmp_path: Path) -> None:
    """No 4.x producer of the half message's group is connected (no heartbeat): the remoting
    check says so and the RocketMQ 5 producer of the topic is asked over Telemetry instead; its
    answer ends the transaction over remoting."""
    broker = start_broker(tmp_path / "store", transaction_timeout_ms=200, transaction_check_interval_ms=200)
    try:
        with grpc.insecure_channel(broker.address) as channel, \
                RemotingTestClient(broker.config.remoting_listen) as producer:
            stream = TelemetryStream(V2Client(channel, "v5-producer"), publishing(TOPIC))
            try:
                assert stream.next().status.code == v2.OK
                sent = prepared(producer, b"asked-over-telemetry", "TX-5")
                recover = recover_command(stream)
                assert recover.transaction_id == sent.ext_fields["transactionId"]
                assert (recover.message.topic.name, recover.message.body) == (TOPIC, b"asked-over-telemetry")
            finally:
                stream.close()
            assert producer.call(end_transaction(sent, 12, from_check=True)).code == ResponseCode.SUCCESS
            assert broker.controller.processors.end_transaction.open == {}
    finally:
        broker.stop()


def test_a_4x_producer_of_the_group_is_asked_before_a_rocketmq5_producer_of_the_topic(
        tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "store", transaction_timeout_ms=200, transaction_check_interval_ms=200)
    try:
        with grpc.insecure_channel(broker.address) as channel, \
                RemotingTestClient(broker.config.remoting_listen) as producer:
            heartbeat = {"clientID": "tx-client", "producerDataSet": [{"groupName": "tx-pg"}],
                         "consumerDataSet": []}
            joined = producer.call(request(RequestCode.HEART_BEAT, body=json.dumps(heartbeat).encode()))
            assert joined.code == ResponseCode.SUCCESS
            stream = TelemetryStream(V2Client(channel, "v5-producer"), publishing(TOPIC))
            try:
                assert stream.next().status.code == v2.OK
                sent = prepared(producer, b"asked-over-remoting", "TX-6")
                check = producer.read()
                assert check.code == RequestCode.CHECK_TRANSACTION_STATE
                assert check.ext_fields["transactionId"] == sent.ext_fields["transactionId"]
                assert producer.call(end_transaction(sent, 12, from_check=True)).code == ResponseCode.SUCCESS
                assert stream.commands.empty()   # the RocketMQ 5 producer was not asked
            finally:
                stream.close()
    finally:
        broker.stop()


def test_a_4x_prepared_send_past_the_open_transactions_bound_stores_no_half_message(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "store", max_open_transactions=1)
    try:
        with RemotingTestClient(broker.config.remoting_listen) as producer:
            prepared(producer, b"first", "TX-7")
            store = broker.controller.store
            halves = store.get_max_offset_in_queue(HALF_TOPIC, 0)
            properties = {"UNIQ_KEY": "TX-8", "PGROUP": "tx-pg", "TRAN_MSG": "true"}
            refused = producer.call(send_v2(b"second", properties, 1, sys_flag=4))
            assert refused.code == ResponseCode.SYSTEM_BUSY and "max_open_transactions" in refused.remark
            assert store.get_max_offset_in_queue(HALF_TOPIC, 0) == halves   # nothing left behind
    finally:
        broker.stop()
