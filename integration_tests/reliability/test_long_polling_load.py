"""Scenario 7: long polling under load. 1,000 pulls are held by the broker at the end of their
queues while other RPCs keep being answered; then producers send and every held pull wakes
with the first new message of its own queue. Pulls a client abandons (deadline) are
released, and the broker keeps holding and waking new ones afterwards."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from integration_tests.reliability.report import ReliabilityReport, ScenarioFigures
from integration_tests.reliability.traffic import Producers
from rmq.cli import processes
from rmq.connector.client import RmqClient
from rmq.connector.message_decoder import decode
from rmq.v1 import rmq_pb2, rmq_pb2_grpc

pytestmark = pytest.mark.integration

TOPIC = "long-poll"
QUEUES = 8
HELD = 1000
CHANNELS = 10
HOLD_MS = 30_000
PROBE_DEADLINE_S = 5.0


def _held_pull(stub: rmq_pb2_grpc.MessagingServiceStub, queue_id: int, offset: int, hold_ms: int,
               deadline_s: float) -> grpc.Future:
    request = rmq_pb2.PullMessageRequest(
        consumer_group="long-poll-group", topic=TOPIC, queue_id=queue_id, queue_offset=offset,
        max_messages=8, sys_flag=rmq_pb2.FLAG_SUSPEND | rmq_pb2.FLAG_SUBSCRIPTION,
        suspend_timeout_ms=hold_ms, sub_expression="*")
    return stub.PullMessage.future(request, timeout=deadline_s)


def _probe(stubs: dict[str, object]) -> list[float]:
    """One round of other RPCs; each must answer within PROBE_DEADLINE_S. Returns latencies (ms)."""
    latencies = []
    for call, request in ((stubs["route"].ListBrokers, rmq_pb2.ListBrokersRequest()),
                          (stubs["messaging"].GetTopicOffsets, rmq_pb2.GetTopicOffsetsRequest(topic=TOPIC)),
                          (stubs["messaging"].QueryConsumerOffsets,
                           rmq_pb2.QueryConsumerOffsetsRequest(consumer_group="long-poll-group"))):
        started = time.monotonic()
        response = call(request, timeout=PROBE_DEADLINE_S)
        latencies.append((time.monotonic() - started) * 1000)
        assert response.status.code == rmq_pb2.OK
    return latencies


def test_thousand_held_pulls_wake_correctly_and_the_broker_stays_responsive(
        tmp_path: Path, report: ReliabilityReport) -> None:
    server = processes.broker(tmp_path, flush="sync")
    server.start()
    channels = [grpc.insecure_channel(server.address) for _ in range(CHANNELS)]
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=QUEUES)
        stubs = [rmq_pb2_grpc.MessagingServiceStub(channel) for channel in channels]
        probes = {"route": rmq_pb2_grpc.RouteServiceStub(channels[0]), "messaging": stubs[0]}

        woken_at: dict[int, float] = {}
        lock = threading.Lock()
        held = []
        for n in range(HELD):
            future = _held_pull(stubs[n % CHANNELS], n % QUEUES, 0, HOLD_MS, HOLD_MS / 1000 + 30)
            future.add_done_callback(lambda _, n=n: _mark(woken_at, lock, n))
            held.append(future)
        time.sleep(2.0)
        idle_probe_ms = [ms for _ in range(10) for ms in _probe(probes)]
        assert not any(f.done() for f in held), "a held pull returned before any message arrived"

        with Producers(server.address, TOPIC, threads=2, batch=32, max_batches=40) as producers:
            busy_probe_ms = [ms for _ in range(10) for ms in _probe(probes)]
            producers.wait()
        responses = [future.result() for future in held]

        # Abandoned pulls (client deadline long before the hold time) must not break later holds.
        with RmqClient(server.address) as client:
            ends = {mq.queue_id: o.max_offset for mq, o in client.topic_offsets(TOPIC).items()}
        abandoned = [_held_pull(stubs[n % CHANNELS], n % QUEUES, ends[n % QUEUES], HOLD_MS, 0.5)
                     for n in range(200)]
        for future in abandoned:
            assert future.exception().code() == grpc.StatusCode.DEADLINE_EXCEEDED
        late = [_held_pull(stubs[0], q, ends[q], HOLD_MS, 60) for q in range(QUEUES)]
        with Producers(server.address, TOPIC, threads=1, batch=QUEUES * 4, max_batches=1) as last:
            last.wait()
        late_responses = [future.result() for future in late]
        still_responsive = _probe(probes)
    finally:
        for channel in channels:
            channel.close()
        server.stop()

    first_ack = {}
    for ack in producers.ledger.acknowledged:
        first_ack.setdefault(ack.message.queue_id, ack.at)
    correct = 0
    for n, response in enumerate(responses):
        assert response.status.code == rmq_pb2.OK and response.pull_status == rmq_pb2.FOUND, response.status
        batch = decode(response.messages, "broker-a").to_pydict()
        assert batch["queue_id"][0] == n % QUEUES and batch["queue_offset"][0] == 0
        correct += 1
    for q, response in enumerate(late_responses):
        assert response.pull_status == rmq_pb2.FOUND
        assert decode(response.messages, "broker-a").to_pydict()["queue_offset"][0] == ends[q]
    assert len(still_responsive) == 3
    wake_ms = np.array([(woken_at[n] - first_ack[n % QUEUES]) * 1000 for n in range(HELD)])
    report.record(ScenarioFigures(
        "7 long polling: 1,000 held pulls + producers", producers.ledger.sent,
        len(producers.ledger.acknowledged),
        read=correct, lost=HELD - correct, duplicated=0,
        notes="read = held pulls woken with their queue's first message; 200 abandoned pulls released",
        extra={"wake_after_first_ack_p50_ms": f"{np.percentile(wake_ms, 50):.1f}",
               "wake_after_first_ack_p99_ms": f"{np.percentile(wake_ms, 99):.1f}",
               "rpc_p99_ms_idle": f"{np.percentile(idle_probe_ms, 99):.1f}",
               "rpc_p99_ms_waking": f"{np.percentile(busy_probe_ms, 99):.1f}"}))


def _mark(woken_at: dict[int, float], lock: threading.Lock, n: int) -> None:
    with lock:
        woken_at[n] = time.monotonic()
