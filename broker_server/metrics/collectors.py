"""Prometheus metrics of the broker and the name server (`--metrics-listen HOST:PORT`, off by
default), in the text format through prometheus_client. Figures are read from the live
objects at scrape time. Three vocabularies: RocketMQ 5's broker metrics (`rocketmq_messages_in_total`,
`rocketmq_consumer_lag_messages`, ... with `cluster`, `node_type`, `node_id`, `topic`,
`consumer_group` labels: docs/metrics.md), so RocketMQ's Grafana dashboards work;
rocketmq-exporter's per-queue names (`rocketmq_group_diff`, `rocketmq_producer_offset`,
`rocketmq_consumer_offset`); the rest are `rmq_*`. Process figures:
prometheus_client's own (`process_resident_memory_bytes`, `process_open_fds`, ...) plus
`rmq_process_threads` and `rmq_process_mmaps`, which it does not have."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector

from rmq.broker_server.config import DEFAULT_CLUSTER_NAME
from rmq.broker_server.errors import UserError
from rmq.broker_server.metrics.broker_stats import OTHER_GROUPS, BrokerStatsManager, GroupLabels
from rmq.broker_server.metrics.metrics_http import MetricsHttpServer
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.command_line import is_loopback


class MetricsStore(Protocol):
    """What the broker's metrics read from the store."""

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int: ...

    def dispatch_behind_bytes(self) -> int: ...

    def get_commit_log_max_offset(self) -> int: ...

    def disk_used_ratio(self) -> float: ...

    def get_store_timestamp_at(self, topic: str, queue_id: int, offset: int) -> int: ...

    def get_commit_log_min_offset(self) -> int: ...


@dataclass(frozen=True)
class QueueOffset:
    group: str
    topic: str
    queue_id: int
    offset: int
    account: str = ""        # the account that added the entry ("" when loaded at start or no --acl)


@dataclass(frozen=True)
class BoundedTables:
    """Sizes of the other tables clients fill (each bounded by a BrokerConfig max_* setting)."""

    subscription_bytes: int = 0
    queue_locks: int = 0
    consumer_offsets: int = 0


@dataclass(frozen=True)
class TimerFigures:
    """The timer wheel's figures (docs/internals/timer.md §Metrics)."""

    pending: int = 0          # timer messages waiting
    delivered: int = 0        # delivered since the broker started
    lateness_ms: int = 0      # the last delivery's lateness behind its asked time


@dataclass(frozen=True)
class BrokerFigures:
    """Where the broker's metrics come from, as callables so the collector holds no broker type."""

    broker_name: str
    store: MetricsStore
    stats: BrokerStatsManager
    held_pulls: Callable[[], int]
    consumer_offsets: Callable[[], Iterable[QueueOffset]]
    consumer_table: Callable[[], tuple[int, int]]       # (groups, clients)
    topics: Callable[[], int]
    client_tables: Callable[[], BoundedTables] = lambda: BoundedTables()
    inflight_pull_bytes: Callable[[], int] = lambda: 0
    timers: Callable[[], TimerFigures] = TimerFigures
    node_id: str = ""                       # RocketMQ 5's node_id label; the broker name when empty
    cluster: str = DEFAULT_CLUSTER_NAME
    now_ms: Callable[[], int] = lambda: int(time.time() * 1000)


class BrokerCollector(Collector):
    def __init__(self, figures: BrokerFigures) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Metric]:
        figures, broker = self.figures, self.figures.broker_name
        offsets = list(figures.consumer_offsets())
        names = _group_names(figures.stats.labels, offsets)
        named = [entry for entry in offsets if names[entry.group] != OTHER_GROUPS]
        yield from _topic_counters(broker, figures.stats)
        yield from _consumer_offsets(broker, figures.store, named)
        yield from rocketmq5_metrics(figures, offsets, names)
        groups, clients = figures.consumer_table()
        tables = figures.client_tables()
        store = figures.store
        timers = figures.timers()
        delivered = CounterMetricFamily("rocketmq_timer_dequeue", "timer messages delivered to their queue",
                                        labels=["broker"])
        delivered.add_metric([broker], timers.delivered)
        yield delivered
        for name, documentation, value in [
            ("rocketmq_timing_messages", "timer messages waiting for their time", timers.pending),
            ("rmq_timer_lateness_ms", "the last timer delivery's lateness behind its time (ms)",
             timers.lateness_ms),
            ("rmq_held_pulls", "pull requests held by long polling", figures.held_pulls()),
            ("rmq_inflight_pull_bytes", "bytes of pull answers built and not yet read by their clients",
             figures.inflight_pull_bytes()),
            ("rmq_dispatch_behind_bytes", "CommitLog bytes not yet dispatched to ConsumeQueues",
             store.dispatch_behind_bytes()),
            ("rmq_commitlog_max_offset_bytes", "CommitLog max physical offset",
             store.get_commit_log_max_offset()),
            ("rmq_store_disk_used_ratio", "used fraction of the store directory's disk",
             store.disk_used_ratio()),
            ("rmq_consumer_groups", "consumer groups with live clients", groups),
            ("rmq_consumer_clients", "live consumer clients over all groups", clients),
            ("rmq_topics", "topics this broker holds", figures.topics()),
            ("rmq_consumer_subscription_bytes", "characters of every live client's subscriptions",
             tables.subscription_bytes),
            ("rmq_queue_locks", "ordered-consumption queue locks held", tables.queue_locks),
            ("rmq_consumer_offset_entries", "committed (group, topic, queue) offsets stored",
             tables.consumer_offsets),
        ]:
            yield _gauge(name, documentation, ["broker"], [([broker], value)])


def _group_names(labels: GroupLabels, offsets: Iterable[QueueOffset]) -> dict[str, str]:
    """Each group of the entries -> the name /metrics gives it (GroupLabels), asked once per group."""
    names: dict[str, str] = {}
    for entry in offsets:
        if entry.group not in names:
            names[entry.group] = labels.label(entry.group, entry.account)
    return names


def _topic_counters(broker: str, stats: BrokerStatsManager) -> Iterator[Metric]:
    snapshot = sorted(stats.snapshot().items())
    for name, documentation, field in [
        ("rmq_put_messages", "messages stored per topic", "put_messages"),
        ("rmq_put_bytes", "message bytes stored per topic", "put_bytes"),
        ("rmq_get_messages", "messages pulled per topic", "get_messages"),
        ("rmq_get_bytes", "record bytes pulled per topic", "get_bytes"),
    ]:
        family = CounterMetricFamily(name, documentation, labels=["broker", "topic"])
        for topic, counters in snapshot:
            family.add_metric([broker, topic], getattr(counters, field))
        yield family


def _consumer_offsets(broker: str, store: MetricsStore, offsets: Iterable[QueueOffset]) -> Iterator[Metric]:
    labels = ["broker", "group", "topic", "queue_id"]
    diff = GaugeMetricFamily("rocketmq_group_diff", "messages behind per consumer group and queue (lag)",
                             labels=labels)
    consumer = GaugeMetricFamily("rocketmq_consumer_offset", "committed consumer offset", labels=labels)
    producer: dict[tuple[str, int], int] = {}
    for entry in offsets:
        key = (entry.topic, entry.queue_id)
        if key not in producer:
            producer[key] = store.get_max_offset_in_queue(entry.topic, entry.queue_id)
        values = [broker, entry.group, entry.topic, str(entry.queue_id)]
        diff.add_metric(values, max(producer[key] - entry.offset, 0))
        consumer.add_metric(values, entry.offset)
    yield diff
    yield consumer
    yield _gauge("rocketmq_producer_offset", "max offset per queue with a consumer group",
                 ["broker", "topic", "queue_id"],
                 [([broker, topic, str(queue_id)], offset)
                  for (topic, queue_id), offset in sorted(producer.items())])


NODE_LABELS = ["cluster", "node_type", "node_id"]


def broker_node_id(broker_name: str, broker_id: int) -> str:
    """A broker group member's node_id: the group's name for its master, `<name>-<id>` for a slave."""
    return broker_name if broker_id == 0 else f"{broker_name}-{broker_id}"


def rocketmq5_metrics(figures: BrokerFigures, offsets: Sequence[QueueOffset],
                      names: Mapping[str, str]) -> Iterator[Metric]:
    """RocketMQ 5's broker metrics (5.1+, BrokerMetricsManager) from the same live figures. Every
    family is at most one series per topic or per (topic, group): no queue label, so a large
    cluster's scrape stays bounded by its topics and groups (and those by the broker's tables)."""
    node = [figures.cluster, "broker", figures.node_id or figures.broker_name]
    by_topic = sorted(figures.stats.snapshot().items())
    for name, documentation, field in [
        ("rocketmq_messages_in", "messages produced", "put_messages"),
        ("rocketmq_throughput_in", "bytes of message bodies produced", "put_bytes"),
    ]:
        family = CounterMetricFamily(name, documentation, labels=NODE_LABELS + ["topic", "message_type"])
        for topic, counters in by_topic:
            family.add_metric(node + [topic, "normal"], getattr(counters, field))
        yield family
    by_group = sorted(figures.stats.group_snapshot().items())
    for name, documentation, field in [
        ("rocketmq_messages_out", "messages consumed (pulled)", "get_messages"),
        ("rocketmq_throughput_out", "bytes of records consumed (pulled)", "get_bytes"),
        ("rocketmq_send_to_dlq_messages", "messages moved to a consumer group's dead-letter queue",
         "send_to_dlq"),
    ]:
        family = CounterMetricFamily(name, documentation, labels=NODE_LABELS + ["topic", "consumer_group"])
        for (topic, group), group_counters in by_group:
            if group:
                family.add_metric(node + [topic, group], getattr(group_counters, field))
        yield family
    yield from _group_lag(figures, node, offsets, names)
    store = figures.store
    for name, documentation, value in [
        ("rocketmq_storage_size", "bytes of CommitLog the broker holds (max offset - min offset)",
         store.get_commit_log_max_offset() - max(store.get_commit_log_min_offset(), 0)),
        ("rocketmq_storage_dispatch_behind_bytes", "CommitLog bytes not yet dispatched to ConsumeQueues",
         store.dispatch_behind_bytes()),
        ("rocketmq_topic_number", "topics the broker holds", figures.topics()),
        ("rocketmq_consumer_group_number", "consumer groups with live clients", figures.consumer_table()[0]),
    ]:
        yield _gauge(name, documentation, NODE_LABELS, [(node, value)])


def _group_lag(figures: BrokerFigures, node: list[str], offsets: Sequence[QueueOffset],
               names: Mapping[str, str]) -> Iterator[Metric]:
    """Per (topic, group): messages not yet consumed (max offset - committed offset, summed over
    the queues) and how old the oldest of them is (now - its store time, the largest over the
    queues; 0 when caught up). Groups past GroupLabels' bounds are summed under OTHER_GROUPS, whose
    latency is not read (a store read per entry of groups nobody may name)."""
    lag: dict[tuple[str, str], int] = {}
    latency: dict[tuple[str, str], int] = {}
    produced: dict[tuple[str, int], int] = {}
    now = figures.now_ms()
    store = figures.store
    for entry in offsets:
        key = (entry.topic, names[entry.group])
        queue_id = entry.queue_id
        if (entry.topic, queue_id) not in produced:
            produced[(entry.topic, queue_id)] = store.get_max_offset_in_queue(entry.topic, queue_id)
        behind = max(produced[(entry.topic, queue_id)] - entry.offset, 0)
        lag[key] = lag.get(key, 0) + behind
        read = behind > 0 and key[1] != OTHER_GROUPS
        oldest = store.get_store_timestamp_at(entry.topic, queue_id, entry.offset) if read else 0
        latency[key] = max(latency.get(key, 0), now - oldest if oldest else 0)
    labels = NODE_LABELS + ["topic", "consumer_group"]
    yield _gauge("rocketmq_consumer_lag_messages", "messages not yet consumed by the group", labels,
                 [(node + [topic, group], behind) for (topic, group), behind in sorted(lag.items())])
    ages = [(node + [topic, group], age) for (topic, group), age in sorted(latency.items())]
    yield _gauge("rocketmq_consumer_lag_latency",
                 "milliseconds since the oldest unconsumed message was stored", labels, ages)


class Routes(Protocol):
    """What the name server's metrics read from its route table."""

    def live_brokers(self) -> Sequence[object]: ...

    def topics(self) -> Sequence[object]: ...


class NameServerCollector(Collector):
    def __init__(self, routes: Routes) -> None:
        self.routes = routes

    def collect(self) -> Iterator[Metric]:
        yield _gauge("rmq_namesrv_live_brokers", "brokers registered and not expired", [],
                     [([], len(self.routes.live_brokers()))])
        yield _gauge("rmq_namesrv_topics", "topics routed (over all live brokers)", [],
                     [([], len(self.routes.topics()))])


class ProcessExtrasCollector(Collector):
    """Threads and memory mappings of this process (from /proc), which prometheus_client's
    process collector does not report."""

    def collect(self) -> Iterator[Metric]:
        yield _gauge("rmq_process_threads", "OS threads of the process", [], [([], process_threads())])
        yield _gauge("rmq_process_mmaps", "memory mappings of the process (/proc/self/maps lines)", [],
                     [([], process_mmaps())])


def process_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def process_mmaps() -> int:
    with Path("/proc/self/maps").open("rb") as maps:
        return sum(1 for _ in maps)


def _gauge(name: str, documentation: str, labels: list[str],
           samples: Iterable[tuple[list[str], float]]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=labels)
    for values, value in samples:
        family.add_metric(values, value)
    return family


def check_metrics_listen(listen: str, security: ServerSecurity) -> tuple[str, int]:
    """(host, port) of `--metrics-listen`. A non-loopback address needs --acl or TLS, and with --acl
    also TLS: scrapers then send an admin account's credentials (metrics_http)."""
    host, _, port = listen.rpartition(":")
    if not is_loopback(listen):
        if security.acl_file is None and security.tls is None:
            raise UserError(f"--metrics-listen {listen}: a non-loopback metrics address needs --acl or TLS "
                            "(without --acl the metrics endpoint itself is not authenticated)")
        if security.acl_file is not None and security.tls is None:
            raise UserError(f"--metrics-listen {listen}: with --acl a non-loopback metrics address needs "
                            "--tls-cert (scrapers send an admin account's secret key)")
    return host.strip("[]"), int(port)


def serve_metrics(listen: str, security: ServerSecurity, *collectors: Collector) -> MetricsHttpServer:
    """Start the scrape endpoint on its own threads (metrics_http): beyond loopback over the server's
    TLS and, with --acl, for admin accounts only."""
    host, port = check_metrics_listen(listen, security)
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    registry.register(ProcessExtrasCollector())
    for collector in collectors:
        registry.register(collector)
    loopback, acl_file = is_loopback(listen), security.acl_file
    try:
        return MetricsHttpServer((host, port), registry,
                                 None if loopback or acl_file is None else (lambda: acl_file.acl),
                                 None if loopback else security.tls, security.refusals).start()
    except OSError as error:
        raise UserError(f"--metrics-listen {listen}: cannot bind: {error.strerror}") from None
