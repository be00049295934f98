"""Scenario 7: long polling under load. 1,000 pulls are held by the broker at the end of their
queues while other RPCs keep being answered; then producers send and every held pull wakes
with the first new message of its own queue, woken by the arrival: the broker's fallback check
runs only every 60 s and the hold time is 30 s, so a wake after WAKE_BOUND_S means the arrival
notification failed. After 200 pulls a client abandons (deadline), the broker keeps holding and
waking new ones (that abandoned pulls leave the hold table is asserted from inside the broker in
tests/broker_server/test_held_pulls.py). Figures are recorded before the asserts."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from integration_tests.reliability.brokers import configured_broker
from integration_tests.reliability.report import ReliabilityReport, ScenarioFigures
from integration_tests.reliability.resource_samples import scrape
from integration_tests.reliability.traffic import Producers
from rmq.connector.client import RmqClient
from rmq.connector.spark.message_decoder import decode
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from testing import processes
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

TOPIC = "long-poll"
QUEUES = 8
HELD = 1000
CHANNELS = 10      # 100 held pulls each (the broker admits 1,024 calls per connection)
HOLD_MS = 30_000
PROBE_DEADLINE_S = 5.0
FALLBACK_CHECK_MS = 60_000     # longer than HOLD_MS: only the arrival notification wakes early
WAKE_BOUND_S = 5.0             # far below HOLD_MS, loose enough for 1,000 wakes on a busy machine


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
    metrics = f"127.0.0.1:{processes.free_port()}"
    server = configured_broker(tmp_path, flush="sync", hold_check_interval_ms=FALLBACK_CHECK_MS,
                               metrics_listen=metrics)
    server.start()
    # own connection per channel (gRPC would share one), the last one for the probes
    channels = [grpc.insecure_channel(server.address, options=[("grpc.use_local_subchannel_pool", 1)])
                for _ in range(CHANNELS + 1)]
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=QUEUES)
        stubs = [rmq_pb2_grpc.MessagingServiceStub(channel) for channel in channels]
        probes = {"route": rmq_pb2_grpc.RouteServiceStub(channels[-1]), "messaging": stubs[-1]}

        woken_at: dict[int, float] = {}
        lock = threading.Lock()
        held = []
        for n in range(HELD):
            future = _held_pull(stubs[n % CHANNELS], n % QUEUES, 0, HOLD_MS, HOLD_MS / 1000 + 30)
            future.add_done_callback(lambda _, n=n: _mark(woken_at, lock, n))
            held.append(future)
        wait_until(lambda: scrape(metrics)["held_pulls"] == HELD, f"the {HELD} pulls held", interval=0.1)
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
    woken_right = [n for n, response in enumerate(responses) if _first_of_queue(response, n % QUEUES, 0)]
    late_right = [q for q, response in enumerate(late_responses) if _first_of_queue(response, q, ends[q])]
    wake_ms = np.array([(woken_at[n] - first_ack[n % QUEUES]) * 1000 for n in range(HELD)])
    report.record(ScenarioFigures(
        "7 long polling: 1,000 held pulls + producers", producers.ledger.sent,
        len(producers.ledger.acknowledged),
        read=len(woken_right), lost=HELD - len(woken_right), duplicated=0,
        notes=f"read = held pulls answered FOUND with their queue's first message (lost = the others); "
              f"fallback check every {FALLBACK_CHECK_MS // 1000} s, hold {HOLD_MS // 1000} s; after 200 "
              f"abandoned pulls {len(late_right)}/{QUEUES} new holds woken right",
        extra={"wake_after_first_ack_p50_ms": f"{np.percentile(wake_ms, 50):.1f}",
               "wake_after_first_ack_p99_ms": f"{np.percentile(wake_ms, 99):.1f}",
               "rpc_p99_ms_idle": f"{np.percentile(idle_probe_ms, 99):.1f}",
               "rpc_p99_ms_waking": f"{np.percentile(busy_probe_ms, 99):.1f}"}))
    assert len(woken_right) == HELD, [r.status for r in responses if r.pull_status != rmq_pb2.FOUND][:3]
    assert late_right == list(range(QUEUES))
    assert wake_ms.max() < WAKE_BOUND_S * 1000, f"slowest wake {wake_ms.max():.0f} ms: not by the arrival"
    assert len(still_responsive) == 3


def _first_of_queue(response: rmq_pb2.PullMessageResponse, queue_id: int, offset: int) -> bool:
    """The pull was answered FOUND and its first message is (queue_id, offset)."""
    if response.status.code != rmq_pb2.OK or response.pull_status != rmq_pb2.FOUND:
        return False
    batch = decode(response.messages, "broker-a").to_pydict()
    return batch["queue_id"][0] == queue_id and batch["queue_offset"][0] == offset


def _mark(woken_at: dict[int, float], lock: threading.Lock, n: int) -> None:
    with lock:
        woken_at[n] = time.monotonic()
