"""Scenario 8: hostile input. Property-based fuzzing of every broker RPC (random field values,
huge sizes, negative offsets, names the broker must refuse), raw serialized bytes with
invalid UTF-8 sent straight to method paths, and raw garbage on the port. The broker must
never crash, must answer business errors as a Status (never an unhandled-exception gRPC
error), must keep holding and waking pulls after abandoned ones (that they leave the hold table
is asserted from inside the broker in tests/broker_server/test_held_pulls.py), and must keep
what it stored intact across a clean restart. The most common mistakes get the status listed
per case; their refusal messages go to RELIABILITY.md."""

from __future__ import annotations

import os
import socket
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from integration_tests.reliability.fuzzing import Rpc, broker_rpcs, invalid_utf8_topic_request, requests
from integration_tests.reliability.report import REPORT, ReliabilityReport, tally
from integration_tests.reliability.resource_samples import scrape
from integration_tests.reliability.traffic import Producers, gaps_and_repeats, read_topic
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.v1 import rmq_pb2
from testing import processes
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

CANARY = "canary"
DEADLINE_S = 10.0
# gRPC codes a hostile request may get: a too-large message, a client deadline. Bytes that do
# not parse as the request type are refused by grpc.aio itself before any broker code runs
# (UNKNOWN "Unexpected DecodeError: Error parsing message"), which is accepted for raw bytes only.
TRANSPORT_REFUSALS = {grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.DEADLINE_EXCEEDED,
                      grpc.StatusCode.INVALID_ARGUMENT}
PARSE_REFUSAL = "Error parsing message"
FIGURES: Counter[str] = Counter()     # outcome -> hostile calls, summed over the module's tests


class Broker:
    """One broker for the whole module, with a canary topic whose data must survive."""

    def __init__(self, tmp_path: Path) -> None:
        self.metrics = f"127.0.0.1:{processes.free_port()}"   # its hold table: rmq_held_pulls
        self.server = processes.broker(tmp_path, flush="sync", extra=["--metrics-listen", self.metrics])
        self.server.start()
        self.channel = grpc.insecure_channel(self.server.address, options=[
            ("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)])
        with RmqClient(self.server.address) as client:
            client.create_topic(CANARY, queues=2)
        with Producers(self.server.address, CANARY, threads=1, batch=50, max_batches=4) as producers:
            producers.wait()
        self.canary = producers.ledger

    def call(self, rpc: Rpc, request: object, raw: bool = False, timeout: float = DEADLINE_S):
        method = self.channel.unary_unary(
            rpc.path, request_serializer=None if raw else rpc.request_class.SerializeToString,
            response_deserializer=rpc.response_class.FromString)
        return method(request, timeout=timeout)

    def assert_alive(self) -> None:
        assert self.server.process.poll() is None, f"broker died: {self.server.log()[-3000:]}"
        response = self.call(_rpc("ListBrokers"), rmq_pb2.ListBrokersRequest())
        assert response.status.code == rmq_pb2.OK


def _rpc(name: str) -> Rpc:
    return next(rpc for rpc in broker_rpcs() if rpc.path.endswith(f"/{name}"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    target = Broker(tmp_path_factory.mktemp("hostile"))
    yield target
    target.channel.close()
    target.server.stop()


def _outcome(broker: Broker, rpc: Rpc, request: object, raw: bool = False) -> str:
    """Call and classify: 'status:<code>' for an answer, 'grpc:<code>' for a refusal. An
    unhandled exception on the broker (UNKNOWN) or a dead broker (UNAVAILABLE) fails."""
    try:
        response = broker.call(rpc, request, raw=raw)
    except grpc.RpcError as error:
        code = error.code()
        parse_refusal = raw and PARSE_REFUSAL in (error.details() or "")
        assert code in TRANSPORT_REFUSALS or parse_refusal, (
            f"{rpc.path} answered {code.name}: {error.details()} for {request!r:.300}")
        return "grpc:unparseable request refused" if parse_refusal else f"grpc:{code.name}"
    return f"status:{rmq_pb2.Code.Name(response.status.code)}" if hasattr(response, "status") else "answered"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(call=requests())
def test_fuzzed_requests_get_a_status_and_never_crash_the_broker(broker: Broker, call) -> None:
    rpc, request = call
    if rpc.path.endswith("/DeleteTopic") and request.topic == CANARY:
        return
    FIGURES[_outcome(broker, rpc, request)] += 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=invalid_utf8_topic_request(), rpc=st.sampled_from(broker_rpcs()))
def test_invalid_utf8_and_raw_bytes_on_method_paths_are_refused(
        broker: Broker, payload: bytes, rpc: Rpc) -> None:
    FIGURES[_outcome(broker, rpc, payload, raw=True)] += 1


def test_huge_and_out_of_range_requests_get_clear_statuses(broker: Broker, report: ReliabilityReport) -> None:
    """Each case gets the status it must get (the clamped pull and the capped delay level are
    accepted on purpose, spec pull §13 / §19); the table goes to RELIABILITY.md."""
    send, pull, create = _rpc("SendMessage"), _rpc("PullMessage"), _rpc("CreateTopic")
    cases = {
        "SendMessage body of 5 MiB": (send, rmq_pb2.SendMessageRequest(
            topic=CANARY, messages=[rmq_pb2.Message(body=b"x" * (5 << 20))]), rmq_pb2.MESSAGE_SIZE_EXCEEDED),
        "SendMessage properties of 40,000 chars": (send, rmq_pb2.SendMessageRequest(
            topic=CANARY, messages=[rmq_pb2.Message(body=b"x", properties={"p": "v" * 40_000})]),
            rmq_pb2.PROPERTIES_SIZE_EXCEEDED),
        "SendMessage empty body": (send, rmq_pb2.SendMessageRequest(
            topic=CANARY, messages=[rmq_pb2.Message()]), rmq_pb2.MESSAGE_ILLEGAL),
        "SendMessage 128-char topic": (send, rmq_pb2.SendMessageRequest(
            topic="t" * 128, messages=[rmq_pb2.Message(body=b"x")]), rmq_pb2.TOPIC_ILLEGAL),
        "SendMessage queue_id 2^31-1": (send, rmq_pb2.SendMessageRequest(
            topic=CANARY, messages=[rmq_pb2.Message(body=b"x", queue_id=2**31 - 1)]),
            rmq_pb2.ILLEGAL_ARGUMENT),
        "SendMessage delay_level 99 (capped at the highest level)": (send, rmq_pb2.SendMessageRequest(
            topic=CANARY, messages=[rmq_pb2.Message(body=b"x", delay_level=99)]), rmq_pb2.OK),
        "SendMessage unknown topic": (send, rmq_pb2.SendMessageRequest(
            topic="no-such-topic", messages=[rmq_pb2.Message(body=b"x")]), rmq_pb2.TOPIC_NOT_EXIST),
        "PullMessage offset -5": (pull, rmq_pb2.PullMessageRequest(
            consumer_group="g", topic=CANARY, queue_id=0, queue_offset=-5, max_messages=10),
            rmq_pb2.ILLEGAL_ARGUMENT),
        "PullMessage queue_id -1": (pull, rmq_pb2.PullMessageRequest(
            consumer_group="g", topic=CANARY, queue_id=-1, queue_offset=0, max_messages=10),
            rmq_pb2.ILLEGAL_ARGUMENT),
        "PullMessage max_messages 2^31-1, max_bytes 2^31-1 (clamped)": (pull, rmq_pb2.PullMessageRequest(
            consumer_group="g", topic=CANARY, queue_id=0, max_messages=2**31 - 1, max_bytes=2**31 - 1),
            rmq_pb2.OK),
        "PullMessage max_messages -1": (pull, rmq_pb2.PullMessageRequest(
            consumer_group="g", topic=CANARY, queue_id=0, max_messages=-1), rmq_pb2.ILLEGAL_ARGUMENT),
        "PullMessage empty group": (pull, rmq_pb2.PullMessageRequest(
            topic=CANARY, queue_id=0, max_messages=1), rmq_pb2.GROUP_ILLEGAL),
        "CreateTopic 0 queues": (create, rmq_pb2.CreateTopicRequest(
            config=rmq_pb2.TopicConfig(topic_name="zero", read_queue_nums=0, write_queue_nums=0, perm=6)),
            rmq_pb2.ILLEGAL_ARGUMENT),
        "CreateTopic 1,000,000 queues": (create, rmq_pb2.CreateTopicRequest(
            config=rmq_pb2.TopicConfig(topic_name="many", read_queue_nums=10**6, write_queue_nums=10**6,
                                       perm=6)), rmq_pb2.ILLEGAL_ARGUMENT),
    }
    wrong = []
    for name, (rpc, request, expected) in cases.items():
        response = broker.call(rpc, request)
        code = rmq_pb2.Code.Name(response.status.code)
        report.record_bad_input("gRPC", name, f"{code}: {response.status.message or 'accepted'}")
        if response.status.code != expected:
            wrong.append(f"{name}: {code} ({response.status.message}), "
                         f"expected {rmq_pb2.Code.Name(expected)}")
    assert wrong == []
    broker.assert_alive()


def test_raw_garbage_on_the_port_does_not_disturb_the_broker(broker: Broker) -> None:
    host, port = broker.server.address.rsplit(":", 1)
    payloads = [os.urandom(4096), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + os.urandom(512),
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff\xff\xff\x00\x00\x00\x00\x00\x01" + b"\x00" * 100,
                b"\x16\x03\x01\x02\x00" + os.urandom(300)]          # a TLS ClientHello-like record
    idle = [socket.create_connection((host, int(port))) for _ in range(100)]
    for payload in payloads:
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            sock.sendall(payload)
            time.sleep(0.05)   # the behaviour under test: a client that sends garbage, lingers, then goes
        broker.assert_alive()
    for sock in idle:
        sock.close()
    broker.assert_alive()


def test_abandoned_and_absurd_held_pulls_are_released(broker: Broker) -> None:
    """Pulls held with hold times from 1 ms to 2^62 ms that their clients abandon; later held
    pulls still wake on a new message."""
    pull = _rpc("PullMessage")
    with RmqClient(broker.server.address) as client:
        end = {mq.queue_id: o.max_offset for mq, o in client.topic_offsets(CANARY).items()}
    for hold_ms in (1, 1000, 2**31, 2**62, -1):
        method = broker.channel.unary_unary(pull.path,
                                            request_serializer=pull.request_class.SerializeToString,
                                            response_deserializer=pull.response_class.FromString)
        futures = [method.future(rmq_pb2.PullMessageRequest(
            consumer_group="abandon", topic=CANARY, queue_id=0, queue_offset=end[0], max_messages=1,
            sys_flag=rmq_pb2.FLAG_SUSPEND, suspend_timeout_ms=hold_ms), timeout=0.3) for _ in range(50)]
        for future in futures:
            try:
                response = future.result()
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error
            else:
                assert response.status.code != rmq_pb2.OK or response.pull_status == rmq_pb2.NO_NEW_MSG
    waiting = method.future(rmq_pb2.PullMessageRequest(
        consumer_group="abandon", topic=CANARY, queue_id=0, queue_offset=end[0], max_messages=1,
        sys_flag=rmq_pb2.FLAG_SUSPEND, suspend_timeout_ms=20_000), timeout=30)
    wait_until(lambda: scrape(broker.metrics)["held_pulls"] == 1,      # the abandoned ones left the table
               lambda: f"only the waiting pull held ({scrape(broker.metrics)['held_pulls']:.0f})",
               interval=0.05)
    with RmqClient(broker.server.address) as client:
        client.send(CANARY, [OutgoingMessage(b"wake-up", queue_id=0)])
    assert waiting.result().pull_status == rmq_pb2.FOUND
    broker.assert_alive()


def test_after_the_abuse_the_store_is_intact_and_the_broker_stops_cleanly(broker: Broker) -> None:
    """Runs last in this module: a clean SIGTERM stop (exit 0) and a restart that serves the
    canary topic's acknowledged messages exactly once."""
    broker.assert_alive()
    assert broker.server.stop() == 0, broker.server.log()[-3000:]
    broker.server.start()
    with RmqClient(broker.server.address) as client:
        read = read_topic(client, CANARY)
    acknowledged = broker.canary.acknowledged_messages()
    outcomes = ", ".join(f"{name} {count}" for name, count in sorted(FIGURES.items()))
    figures = REPORT.record(tally(
        "8 hostile input: fuzzed RPCs, raw bytes, garbage on the port", broker.canary.sent,
        (m.body for m in acknowledged), (m.body for m in read if m.body.startswith(b"s")),
        notes=f"canary topic intact; {sum(FIGURES.values())} hostile calls: {outcomes}"))
    assert figures.lost == 0 and figures.duplicated == 0
    assert set(acknowledged) <= set(read)
    assert gaps_and_repeats(read) == ([], [])
