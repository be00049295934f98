"""RocketMQ 5's metric names and labels on a real in-process broker (docs/metrics.md), and the
Grafana dashboard shipped in docs/grafana asking only for series the broker really exposes."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rmq.broker_server.metrics.broker_stats import OTHER_GROUPS, BrokerStatsManager
from rmq.broker_server.metrics.collectors import BrokerCollector, BrokerFigures
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from tests.broker_server.in_process_broker import InProcessBroker

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "rmq-rocketmq5.json"
NODE = {"cluster": "DefaultCluster", "node_type": "broker", "node_id": "broker-a"}
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(figures: BrokerFigures) -> Samples:
    registry = CollectorRegistry()
    registry.register(BrokerCollector(figures))
    text = generate_latest(registry).decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted({**NODE, **labels}.items())))]


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    server = InProcessBroker(tmp_path).start()
    try:
        yield server
    finally:
        server.stop()


def test_rocketmq5_names_count_traffic_lag_and_dead_letters(broker: InProcessBroker) -> None:
    q0 = MessageQueue("Orders", "broker-a", 0)
    with RmqClient(broker.address) as client:
        client.create_topic("Orders", queues=2)
        client.send("Orders", [OutgoingMessage(b"x" * 10, queue_id=i % 2) for i in range(10)])
        store = broker.controller.store
        first_ms = store.get_store_timestamp_at("Orders", 0, 0)
        while time.time() * 1000 <= first_ms + 1:     # the next batch gets a later store time
            pass
        client.send("Orders", [OutgoingMessage(b"x" * 10, queue_id=i % 2) for i in range(20)])
        assert client.pull(q0, 0, 3, group="g1").messages.count == 3
        client.update_consumer_offsets("g1", {q0: 3})
        client.send_message_back("g1", "broker-a", 0, delay_level=-1)    # the first record, to the DLQ
    assert store.get_store_timestamp_at("Orders", 0, 14) > first_ms      # two batches, two store times
    figures = dataclasses.replace(broker.controller.metrics_figures(), now_ms=lambda: first_ms + 1234)
    samples = scrape(figures)
    assert value(samples, "rocketmq_messages_in_total", topic="Orders", message_type="normal") == 30
    assert value(samples, "rocketmq_throughput_in_total", topic="Orders", message_type="normal") == 300
    assert value(samples, "rocketmq_messages_out_total", topic="Orders", consumer_group="g1") == 3
    assert value(samples, "rocketmq_consumer_lag_messages", topic="Orders", consumer_group="g1") == 12
    assert value(samples, "rocketmq_consumer_lag_latency", topic="Orders", consumer_group="g1") == 1234
    assert value(samples, "rocketmq_send_to_dlq_messages_total", topic="Orders", consumer_group="g1") == 1
    assert value(samples, "rocketmq_topic_number") >= 1
    assert value(samples, "rocketmq_storage_size") == store.get_commit_log_max_offset()


def test_a_caught_up_group_has_no_lag_and_no_latency(broker: InProcessBroker) -> None:
    q0 = MessageQueue("Orders", "broker-a", 0)
    with RmqClient(broker.address) as client:
        client.create_topic("Orders", queues=1)
        client.send("Orders", [OutgoingMessage(b"x") for _ in range(3)])
        client.update_consumer_offsets("g1", {q0: 3})
    samples = scrape(broker.controller.metrics_figures())
    assert value(samples, "rocketmq_consumer_lag_messages", topic="Orders", consumer_group="g1") == 0
    assert value(samples, "rocketmq_consumer_lag_latency", topic="Orders", consumer_group="g1") == 0


def test_group_series_are_bounded() -> None:
    """A client inventing group names cannot grow the per-group table (or the scrape) past its bound."""
    stats = BrokerStatsManager(max_group_series=2)
    for group in ("a", "b", "c", "d"):
        stats.record_get("T", 1, 10, group)
    snapshot = stats.group_snapshot()
    assert sorted(snapshot) == [("T", OTHER_GROUPS), ("T", "a"), ("T", "b")]
    assert snapshot[("T", OTHER_GROUPS)].get_messages == 2


def test_the_grafana_dashboard_asks_only_for_exposed_metrics(broker: InProcessBroker) -> None:
    with RmqClient(broker.address) as client:
        client.create_topic("Orders", queues=1)
        client.send("Orders", [OutgoingMessage(b"x")])
        client.update_consumer_offsets("g1", {MessageQueue("Orders", "broker-a", 0): 0})
        client.pull(MessageQueue("Orders", "broker-a", 0), 0, 1, group="g1")
    exposed = {name for name, _ in scrape(broker.controller.metrics_figures())}
    panels = json.loads(DASHBOARD.read_text())["panels"]
    expressions = [target["expr"] for panel in panels for target in panel.get("targets", [])]
    wanted = {name for expr in expressions for name in re.findall(r"\brocketmq_[a-z_]+", expr)}
    assert len(wanted) >= 8
    assert wanted <= exposed, sorted(wanted - exposed)
