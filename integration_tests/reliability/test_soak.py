"""Scenario 12: soak. Mixed load against one broker process for RMQ_SOAK_SECONDS (60 in `make
test`, 600 in `make reliability`): batched and single-message producers, a group of two
PushConsumers, long-poll holders on an idle topic, topic create/send/delete churn, and consumer
churn (thousands of short-lived client ids joining groups, locking queues and leaving; one in ten
vanishes without unregistering and expires). The broker's RSS, open fds, threads, mmaps, held
pulls and table sizes are sampled from --metrics-listen; after the warm-up each must stay flat
(bounds below, generous because the machine is shared and the samples are noisy) and every
acknowledged message is consumed by the group (lost 0; duplicates reported)."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import pytest

from integration_tests.reliability.brokers import configured_broker
from integration_tests.reliability.report import ReliabilityReport, tally
from integration_tests.reliability.resource_samples import ResourceSampler, by_figure
from integration_tests.reliability.traffic import Producers, PushGroup
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from rmq.connector.errors import RmqError
from testing import processes

pytestmark = pytest.mark.integration

SOAK_SECONDS = float(os.environ.get("RMQ_SOAK_SECONDS", "60"))
WARM_UP_S = max(15.0, SOAK_SECONDS / 4)
TOPIC, IDLE = "soak", "soak-idle"
QUEUES = 8
SETTINGS = dict(client_expiry_ms=10_000, client_scan_interval_ms=2_000)
# after the warm-up: growth over the rest of the run (max - first sample after the warm-up)
GROWTH_BOUNDS = {"rss_mib": 128, "open_fds": 32, "threads": 16, "mmaps": 64}
RSS_SLOPE_BOUND_MIB_PER_MIN = 32.0
TABLE_BOUNDS = {"held_pulls": 64, "consumer_clients": 400, "consumer_groups": 40, "queue_locks": 200,
                "topics": 40}
TABLE_SLOPE_BOUND_PER_MIN = 20.0     # entries per minute after the warm-up (a leak of churned ids: >100)


class Churn:
    """Background loops (each `action(n)` with a running count) until stopped; counts their runs."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.runs: dict[str, int] = {}
        self.errors: dict[str, int] = {}
        self._threads: list[threading.Thread] = []

    def loop(self, name: str, action: Callable[[int], None], pause: float) -> None:
        def run() -> None:
            for n in itertools.count():
                if self.stop.is_set():
                    return
                try:
                    action(n)
                    self.runs[name] = self.runs.get(name, 0) + 1
                except RmqError:
                    self.errors[name] = self.errors.get(name, 0) + 1
                self.stop.wait(pause)

        self._threads.append(threading.Thread(target=run, daemon=True, name=name))
        self._threads[-1].start()

    def join(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(60)


def topic_churn(client: RmqClient) -> Callable[[int], None]:
    def churn(n: int) -> None:
        topic = f"soak-churn-{n % 16}"
        client.create_topic(topic, queues=2)
        client.send(topic, [OutgoingMessage(b"c" * 100) for _ in range(10)])
        client.delete_topic(topic)
    return churn


def consumer_churn(client: RmqClient) -> Callable[[int], None]:
    queues = [MessageQueue(TOPIC, "broker-a", queue_id) for queue_id in range(QUEUES)]

    def churn(n: int) -> None:
        client_id, group = f"soak-client-{n}", f"soak-churn-group-{n % 20}"
        client.heartbeat(client_id, group, {TOPIC: f"tag-{n % 50}"})
        client.lock_batch(group, client_id, queues[n % QUEUES:n % QUEUES + 2])
        if n % 10:                        # one in ten vanishes: the scan expires it
            client.unlock_batch(group, client_id, queues[n % QUEUES:n % QUEUES + 2])
            client.unregister(client_id, group)
    return churn


def long_poll_holder(client: RmqClient) -> Callable[[int], None]:
    def hold(n: int) -> None:
        client.pull(MessageQueue(IDLE, "broker-a", n % 4), 0, 32, group="soak-holders",
                    suspend_timeout_ms=2000, timeout=30)
    return hold


@pytest.mark.timeout(SOAK_SECONDS + 300)   # the soak itself, then draining and checking
def test_soak_mixed_load_resources_stay_flat_and_nothing_acknowledged_is_lost(
        tmp_path: Path, report: ReliabilityReport) -> None:
    metrics = f"127.0.0.1:{processes.free_port()}"
    server = configured_broker(tmp_path, flush="sync", **SETTINGS)
    server.args += ["--metrics-listen", metrics]
    server.start()
    churn = Churn()
    try:
        with RmqClient(server.address) as client:
            client.create_topic(TOPIC, queues=QUEUES)
            client.create_topic(IDLE, queues=4)
        group = PushGroup(server.address, TOPIC, "soak-group", consumers=2)
        clients = [RmqClient(server.address, timeout=30) for _ in range(3)]
        with ExitStack() as stack:
            for resource in (group, *clients):
                stack.enter_context(resource)
            group.wait_balanced(QUEUES)
            interval = 2.0 if SOAK_SECONDS < 300 else 5.0
            sampler = stack.enter_context(ResourceSampler(metrics, interval=interval))
            batched = stack.enter_context(Producers(server.address, TOPIC, threads=2, batch=16, pause=0.05))
            single = stack.enter_context(Producers(server.address, TOPIC, threads=1, batch=1, pause=0.02))
            churn.loop("topic churn", topic_churn(clients[0]), pause=0.2)
            churn.loop("consumer churn", consumer_churn(clients[1]), pause=0.01)
            for holder in range(4):
                churn.loop(f"holder {holder}", long_poll_holder(clients[2]), pause=0.0)
            time.sleep(SOAK_SECONDS)   # the behaviour under test: a soak this long
            churn.join()
            ledgers = [batched.stop(), single.stop()]
            sampler.sample_now()
            acknowledged = [m.body for ledger in ledgers for m in ledger.acknowledged_messages()]
            read = group.wait_read(len(set(acknowledged)), timeout=180)
    finally:
        churn.join()
        server.stop()

    summaries = by_figure(sampler.summary(warm_up_s=WARM_UP_S))
    sent = sum(ledger.sent for ledger in ledgers)
    client_ids = churn.runs.get("consumer churn", 0)
    figures = report.record(tally(
        f"12 soak {SOAK_SECONDS:.0f} s: 3 producers (batched + single), a group of 2 PushConsumers, "
        f"4 long-poll holders, topic churn, consumer churn", sent, acknowledged, (m.body for m in read),
        notes=f"{client_ids:,} short-lived client ids, {churn.runs.get('topic churn', 0):,} topics "
              f"created and deleted; churn errors {churn.errors or 0}"))
    report.record_resources(
        f"12 soak {SOAK_SECONDS:.0f} s",
        f"Samples every {sampler.interval:.0f} s; start, max, end and slope after a {WARM_UP_S:.0f} s "
        f"warm-up (one 2-core machine shared with other work: figures are noisy). Bounds checked: growth "
        f"{GROWTH_BOUNDS}, RSS slope < {RSS_SLOPE_BOUND_MIB_PER_MIN} MiB/min, tables {TABLE_BOUNDS} "
        f"with slopes < {TABLE_SLOPE_BOUND_PER_MIN}/min.",
        [summary.cells() for summary in summaries.values()])
    assert figures.lost == 0
    assert client_ids > 100 and churn.runs.get("topic churn", 0) > 10
    for name, bound in GROWTH_BOUNDS.items():
        assert summaries[name].max - summaries[name].start <= bound, (name, summaries[name])
    assert summaries["rss_mib"].slope_per_min < RSS_SLOPE_BOUND_MIB_PER_MIN, summaries["rss_mib"]
    for name, bound in TABLE_BOUNDS.items():
        assert summaries[name].max <= bound, (name, summaries[name])
        assert summaries[name].slope_per_min < TABLE_SLOPE_BOUND_PER_MIN, (name, summaries[name])
