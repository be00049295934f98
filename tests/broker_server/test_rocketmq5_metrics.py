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

from rmq.broker_server.metrics.broker_stats import OTHER_GROUPS, BrokerStatsManager, GroupLabels
from rmq.broker_server.metrics.collectors import BrokerCollector, BrokerFigures
from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from tests.acl_files import write_acl
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


def test_one_account_cannot_grow_the_scrape_with_group_names(tmp_path: Path) -> None:
    """SECURITY #39 finding 11: an account with SUB on one topic commits and pulls under 60
    invented group names (past its share of 20 label values); the scrape names 20 of them, counts
    the rest under _other (their lag summed, not lost), and still names another account's group."""
    acl = write_acl(tmp_path / "acl.yml", "accounts:\n"
                    "  - {accessKey: adminaccount, secretKey: admin-secret-key, admin: true}\n"
                    "  - {accessKey: flooder, secretKey: flooder-secret, topicPerms: ['T=SUB'],"
                    " defaultGroupPerm: SUB}\n"
                    "  - {accessKey: honest, secretKey: honest-secret, topicPerms: ['T=SUB'],"
                    " groupPerms: ['billing=SUB']}\n")
    broker = InProcessBroker(tmp_path / "store", ServerSecurity(acl_file=AclFile(acl)),
                             max_metric_groups=50, max_metric_groups_per_account=20).start()
    q0 = MessageQueue("T", "broker-a", 0)
    try:
        with RmqClient(broker.address, access_key="adminaccount", secret_key="admin-secret-key") as admin:
            admin.create_topic("T", queues=1)
            admin.send("T", [OutgoingMessage(b"x") for _ in range(3)])
        with RmqClient(broker.address, access_key="flooder", secret_key="flooder-secret") as flooder:
            for i in range(60):
                flooder.update_consumer_offsets(f"invented-{i:03}-" + "x" * 200, {q0: 1})
                flooder.pull(q0, 0, 1, group=f"pulled-{i:03}")
        with RmqClient(broker.address, access_key="honest", secret_key="honest-secret") as honest:
            honest.update_consumer_offsets("billing", {q0: 0})
        samples = scrape(broker.controller.metrics_figures())
    finally:
        broker.stop()
    named = {dict(labels).get("consumer_group", dict(labels).get("group")) for _, labels in samples} - {None}
    assert "billing" in named and OTHER_GROUPS in named
    assert len(named - {"billing", OTHER_GROUPS}) == 20                  # its share, pulls and commits
    assert value(samples, "rocketmq_consumer_lag_messages", topic="T", consumer_group="billing") == 3
    invented = len([group for group in named if group.startswith("invented-")])
    assert value(samples, "rocketmq_consumer_lag_messages", topic="T", consumer_group=OTHER_GROUPS) == (
        (60 - invented) * 2)


def test_group_label_values_have_a_total_and_a_share() -> None:
    labels = GroupLabels(max_groups=3, max_per_account=2)
    assert [labels.label(g, "a") for g in ("a1", "a2", "a3")] == ["a1", "a2", OTHER_GROUPS]
    assert [labels.label(g, "b") for g in ("b1", "b2")] == ["b1", OTHER_GROUPS]     # the total
    assert labels.label("a1", "b") == "a1" and labels.label("y" * 256, "") == OTHER_GROUPS


def test_rocketmq5_series_name_the_brokers_cluster(tmp_path: Path) -> None:
    """The `cluster` label is the broker's cluster_name (issue 42: it was DefaultCluster whatever
    the broker was told, as in the 4.x routes)."""
    broker = InProcessBroker(tmp_path, cluster_name="ClusterB").start()
    try:
        samples = scrape(broker.controller.metrics_figures())
    finally:
        broker.stop()
    assert samples[("rocketmq_topic_number", tuple(sorted({**NODE, "cluster": "ClusterB"}.items())))] >= 0
    assert {dict(labels).get("cluster") for _, labels in samples} - {None} == {"ClusterB"}
