"""Prometheus metrics (`--metrics-listen`) of a real broker and name server: per-topic put/get
counters, consumer lag per queue (rocketmq_group_diff), held pulls, process figures; a
non-loopback metrics address without --acl/TLS is refused."""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient
from testing import processes
from tests.waiting import wait_until


def scrape(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_broker_metrics_count_puts_gets_lag_and_held_pulls(tmp_path: Path) -> None:
    metrics = f"127.0.0.1:{processes.free_port()}"
    server = processes.broker(tmp_path, extra=["--metrics-listen", metrics]).start()
    try:
        with RmqClient(server.address) as client:
            client.create_topic("Orders", queues=2)
            client.send("Orders", [OutgoingMessage(b"x" * 10, queue_id=i % 2) for i in range(30)])
            q0 = MessageQueue("Orders", "broker-a", 0)
            result = client.pull(q0, 0, 5, group="g1")
            client.update_consumer_offsets("g1", {q0: 5})
            held = threading.Thread(target=client.pull, args=(MessageQueue("Orders", "broker-a", 1), 15, 1),
                                    kwargs={"group": "g1", "suspend_timeout_ms": 3000, "timeout": 10})
            held.start()

            def held_samples() -> dict | None:
                samples = scrape(metrics)
                return samples if value(samples, "rmq_held_pulls", broker="broker-a") == 1 else None

            samples = wait_until(held_samples, "the pull held", interval=0.05)
            held.join()
        assert result.messages.count == 5
        assert value(samples, "rmq_put_messages_total", broker="broker-a", topic="Orders") == 30
        assert value(samples, "rmq_put_bytes_total", broker="broker-a", topic="Orders") == 300
        assert value(samples, "rmq_get_messages_total", broker="broker-a", topic="Orders") == 5
        lag = dict(broker="broker-a", group="g1", topic="Orders", queue_id="0")
        assert value(samples, "rocketmq_group_diff", **lag) == 10
        assert value(samples, "rocketmq_consumer_offset", **lag) == 5
        queue = dict(broker="broker-a", topic="Orders", queue_id="0")
        assert value(samples, "rocketmq_producer_offset", **queue) == 15
        assert value(samples, "rmq_held_pulls", broker="broker-a") == 1
        assert value(samples, "rmq_topics", broker="broker-a") == 1
        assert value(samples, "process_open_fds") > 0
        assert value(samples, "process_resident_memory_bytes") > 0
        assert value(samples, "rmq_process_threads") > 1
        assert value(samples, "rmq_process_mmaps") > 10
    finally:
        server.stop()


def test_name_server_metrics(tmp_path: Path) -> None:
    metrics = f"127.0.0.1:{processes.free_port()}"
    namesrv = processes.namesrv(tmp_path, extra=["--metrics-listen", metrics]).start()
    broker = processes.broker(tmp_path, namesrv_address=namesrv.address).start()
    try:
        wait_until(lambda: value(scrape(metrics), "rmq_namesrv_live_brokers") == 1,
                   "the broker showed up in the name server's metrics", interval=0.1)
    finally:
        broker.stop()
        namesrv.stop()


def test_non_loopback_metrics_address_needs_acl_or_tls(tmp_path: Path) -> None:
    listen = f"127.0.0.1:{processes.free_port()}"
    run = subprocess.run([sys.executable, "-m", "rmq.cli", "broker", "--listen", listen,
                          "--store-dir", str(tmp_path / "s"), "--metrics-listen", "0.0.0.0:9999"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode != 0
    assert "a non-loopback metrics address needs --acl or TLS" in run.stderr
    assert "Traceback" not in run.stderr
