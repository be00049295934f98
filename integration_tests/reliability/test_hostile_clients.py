"""Scenario 13: hostile clients against one broker process, while a well-behaved producer sends
one message at a time: thousands of distinct consumer groups and client ids, heartbeats with huge
subscription tables, pulls with thousands of distinct sub-expressions and with huge max_messages /
max_bytes, held pulls past the hold-table bound, and a process holding many pulls that is killed
-9 (its connections reset). The broker refuses what passes its bounds with LIMIT_EXCEEDED (the
settings are lowered here so the run stays short), its tables stay at their bounds, the held
pulls of the killed process leave the table, RSS / fds / threads stay bounded, and the producer's
p99 is reported before and during the attack. `make reliability` runs 10,000 groups; `make test`
2,000."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import numpy as np
import pytest

from integration_tests.reliability.brokers import configured_broker
from integration_tests.reliability.report import REPORT_ENV, ReliabilityReport, tally
from integration_tests.reliability.resource_samples import ResourceSampler, by_figure
from integration_tests.reliability.traffic import Producers, read_topic
from rmq.connector.client import OutgoingMessage, RmqClient
from rmq.v1 import rmq_pb2, rmq_pb2_grpc
from testing import processes
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

FULL = os.environ.get(REPORT_ENV) == "1"
GROUPS = 10_000 if FULL else 2_000
MAX_GROUPS = 500
MAX_HELD = 1_000
BASELINE_SENDS = 200      # the producer's latencies measured before the attack (and half as many after)
SUB_EXPRESSIONS = 10_000 if FULL else 2_000
TOPIC, IDLE, PRODUCED = "hostile", "hostile-idle", "hostile-producer"
QUEUES = 4
SETTINGS = dict(max_consumer_groups=MAX_GROUPS, max_held_pulls=MAX_HELD, max_subscription_bytes=8 << 20,
                max_pull_messages=1024)


def pull_request(queue_id: int, **fields: object) -> rmq_pb2.PullMessageRequest:
    request = rmq_pb2.PullMessageRequest(consumer_group="hostile", topic=TOPIC, queue_id=queue_id,
                                         queue_offset=0, max_messages=32, sub_expression="*")
    for name, value in fields.items():
        setattr(request, name, value)
    return request


def held_pull(queue_id: int) -> rmq_pb2.PullMessageRequest:
    request = pull_request(queue_id, sys_flag=rmq_pb2.FLAG_SUSPEND, suspend_timeout_ms=120_000)
    request.topic, request.queue_offset = IDLE, 0
    return request


HOLDER = textwrap.dedent("""
    import sys, time, grpc
    from rmq.v1 import rmq_pb2, rmq_pb2_grpc
    address, count = sys.argv[1], int(sys.argv[2])
    channels = [grpc.insecure_channel(address) for _ in range(4)]
    futures = [rmq_pb2_grpc.MessagingServiceStub(channels[n % 4]).PullMessage.future(
        rmq_pb2.PullMessageRequest(consumer_group="vanishing", topic=sys.argv[3], queue_id=n % 4,
                                   max_messages=1, sub_expression="*", sys_flag=rmq_pb2.FLAG_SUSPEND,
                                   suspend_timeout_ms=120000), timeout=300) for n in range(count)]
    print("sent", flush=True)
    time.sleep(600)   # holds its pulls until the test kills it
""")


def heartbeat(stub: rmq_pb2_grpc.MessagingServiceStub, client_id: str, group: str,
              subscriptions: dict[str, str]) -> int:
    return stub.Heartbeat(rmq_pb2.HeartbeatRequest(
        client_id=client_id, consumer_group=group, message_model=rmq_pb2.CLUSTERING,
        subscriptions=[rmq_pb2.Subscription(topic=t, sub_expression=s) for t, s in subscriptions.items()]),
        timeout=60).status.code


def wait_for(condition, what: str, timeout: float = 60.0) -> None:
    wait_until(condition, what, timeout, interval=0.2)   # the conditions scrape the metrics


def test_hostile_clients_are_bounded_and_a_producer_keeps_its_latency(
        tmp_path: Path, report: ReliabilityReport) -> None:
    metrics = f"127.0.0.1:{processes.free_port()}"
    server = configured_broker(tmp_path, flush="async", **SETTINGS)
    server.args += ["--metrics-listen", metrics]
    server.start()
    refused: Counter[str] = Counter()
    try:
        with RmqClient(server.address) as client:
            for topic in (TOPIC, IDLE, PRODUCED):
                client.create_topic(topic, queues=QUEUES)
            client.send(TOPIC, [OutgoingMessage(b"x" * 1024, tags=f"tag-{i % 16}") for i in range(4000)])
        channel = grpc.insecure_channel(server.address)
        stub = rmq_pb2_grpc.MessagingServiceStub(channel)
        with ResourceSampler(metrics, interval=1.0) as sampler, \
                Producers(server.address, PRODUCED, threads=1, batch=1, pause=0.01) as producer:
            wait_for(lambda: len(producer.ledger.latencies_ms) >= BASELINE_SENDS, "the baseline sends")
            baseline_latencies = list(producer.ledger.latencies_ms)
            attack_started = time.monotonic()

            # thousands of distinct groups and client ids (4 threads)
            with ThreadPoolExecutor(4) as pool:
                codes = list(pool.map(lambda n: heartbeat(stub, f"client-{n}", f"group-{n}", {TOPIC: "*"}),
                                      range(GROUPS)))
            refused["groups"] = sum(code == rmq_pb2.LIMIT_EXCEEDED for code in codes)
            assert set(codes) == {rmq_pb2.OK, rmq_pb2.LIMIT_EXCEEDED}
            assert codes.count(rmq_pb2.OK) == MAX_GROUPS

            # huge subscription tables: too many topics, then too many bytes
            many = {f"topic-{n}": "*" for n in range(2000)}
            assert heartbeat(stub, "huge-1", "group-0", many) == rmq_pb2.LIMIT_EXCEEDED
            big = {f"topic-{n}": " || ".join(f"t{n}-{i}" for i in range(9000))[:65536] for n in range(200)}
            assert heartbeat(stub, "huge-2", "group-0", big) == rmq_pb2.LIMIT_EXCEEDED
            refused["subscriptions"] = 2

            # distinct sub-expressions and huge batch limits
            for n in range(SUB_EXPRESSIONS):
                expression = f"tag-{n} || tag-{n + 1}"
                response = stub.PullMessage(pull_request(n % QUEUES, sub_expression=expression), timeout=60)
                assert response.status.code == rmq_pb2.OK
            huge = stub.PullMessage(pull_request(0, max_messages=2**31 - 1, max_bytes=2**31 - 1), timeout=60)
            assert huge.status.code == rmq_pb2.OK and 0 < huge.messages.count <= 1024   # clamped

            # held pulls past the bound, then a process holding pulls killed -9
            holder = subprocess.Popen(
                [sys.executable, "-c", HOLDER, server.address, str(MAX_HELD - 100), IDLE],
                stdout=subprocess.PIPE, text=True)
            try:
                assert holder.stdout is not None and holder.stdout.readline().strip() == "sent"
                wait_for(lambda: sampler.sample_now()["held_pulls"] >= MAX_HELD - 100, "pulls held")
                extra = [stub.PullMessage.future(held_pull(n % QUEUES), timeout=300) for n in range(300)]
                wait_for(lambda: sum(f.done() for f in extra) >= 200, "refusals past max_held_pulls")
                answered = [f.result().status.code for f in extra if f.done()]
                refused["held pulls"] = answered.count(rmq_pb2.LIMIT_EXCEEDED)
                assert sampler.sample_now()["held_pulls"] == MAX_HELD
            finally:
                holder.kill()
                holder.wait()
            wait_for(lambda: sampler.sample_now()["held_pulls"] <= 100, "the killed holder's pulls released")
            for future in extra:
                future.cancel()
            wait_for(lambda: sampler.sample_now()["held_pulls"] == 0, "cancelled pulls released")
            attack_seconds = time.monotonic() - attack_started
            after_attack = len(producer.ledger.latencies_ms) + BASELINE_SENDS // 2
            wait_for(lambda: len(producer.ledger.latencies_ms) >= after_attack, "sends after the attack")
            attack_latencies = producer.ledger.latencies_ms[len(baseline_latencies):]
        channel.close()
        final = sampler.sample_now()
        with RmqClient(server.address) as client:
            read = read_topic(client, PRODUCED)
    finally:
        server.stop()

    summaries = by_figure(sampler.summary(warm_up_s=0))
    ledger = producer.ledger
    p99_before = float(np.percentile(baseline_latencies, 99))
    p99_during = float(np.percentile(attack_latencies, 99))
    figures = report.record(tally(
        f"13 hostile clients: {GROUPS:,} groups, {SUB_EXPRESSIONS:,} sub-expressions, huge heartbeats and "
        f"pulls, {MAX_HELD:,}+ held pulls, a holder killed -9 (1 producer beside)", ledger.sent,
        (m.body for m in ledger.acknowledged_messages()), (m.body for m in read),
        notes=f"refused with LIMIT_EXCEEDED: {dict(refused)}; attack {attack_seconds:.0f} s",
        producer_p99_ms_before=f"{p99_before:.1f}", producer_p99_ms_during=f"{p99_during:.1f}"))
    report.record_resources(
        "13 hostile clients", f"Bounds lowered for the run: {SETTINGS}. Samples every second over the "
        "whole run (one machine shared with other work: figures are noisy).",
        [summary.cells() for summary in summaries.values()])
    assert figures.lost == 0 and figures.duplicated == 0
    assert summaries["consumer_groups"].max == MAX_GROUPS
    assert summaries["held_pulls"].max <= MAX_HELD and final["held_pulls"] == 0
    assert refused["held pulls"] >= 200
    # generous bounds (a loaded 2-core machine): what the attack leaves behind is small
    assert summaries["rss_mib"].max - summaries["rss_mib"].start < 512
    assert final["open_fds"] - summaries["open_fds"].start < 64
    assert final["threads"] - summaries["threads"].start < 16
