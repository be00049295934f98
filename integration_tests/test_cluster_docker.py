"""docker-compose.yml for real, through testcontainers: the image built from our Dockerfile,
name server + two brokers + Spark master/worker, the producer and the ETL job. Skipped, with
the reason, where no Docker engine (or no `docker compose`) answers, e.g. on our CI machines;
`test_cluster.py` runs the same topology as local processes there."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.docker]

ROOT = Path(__file__).resolve().parent.parent
ENDPOINTS = "namesrv:9876"
PRODUCED = 100_000   # the producer service's --count
ETL_GROUP = "rmq-streaming-etl"
ETL_OUTPUT = "/data/orders_per_minute"


def docker_unavailable() -> str | None:
    """Why the Docker variant cannot run here, or None when it can."""
    if shutil.which("docker") is None:
        return "the docker CLI is not installed"
    info = subprocess.run(["docker", "info"], capture_output=True, text=True)
    if info.returncode != 0:
        detail = (info.stderr.strip().splitlines() or ["no output"])[-1]
        return f"no Docker engine answers `docker info` ({detail})"
    if subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0:
        return "`docker compose` (the Compose v2 plugin) is not available"
    return None


@pytest.fixture(scope="module")
def cluster() -> Iterator:
    reason = docker_unavailable()
    if reason:
        pytest.skip(reason)
    from testcontainers.compose import DockerCompose

    with DockerCompose(ROOT, compose_file_name="docker-compose.yml", build=True, wait=False) as compose:
        yield compose


def wait_until(check: Callable[[], bool], what: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(5)


def rmq_json(cluster, *words: str) -> dict:
    command = ["rmq", *words, "--endpoints", ENDPOINTS, "--json"]
    stdout, _, _ = cluster.exec_in_container(command, "namesrv")   # raises when the command fails
    return json.loads(stdout)


def producer_finished(cluster) -> bool:
    producer = cluster.get_container("producer", include_all=True)
    if producer.State != "exited":
        return False
    assert producer.ExitCode == 0, cluster.get_logs("producer")
    return True


def etl_rows(cluster) -> int:
    probe = f"import pyarrow.dataset as ds; print(ds.dataset('{ETL_OUTPUT}', format='parquet').count_rows())"
    try:
        stdout, _, _ = cluster.exec_in_container(["python", "-c", probe], "etl-job")
    except subprocess.CalledProcessError:   # no output directory yet
        return 0
    return int(stdout)


def etl_caught_up(cluster) -> bool:
    try:
        return rmq_json(cluster, "group", "progress", ETL_GROUP)["total_lag"] == 0
    except subprocess.CalledProcessError:   # no committed offsets yet
        return False


def test_producer_fills_the_8_queues_of_both_brokers(cluster):
    wait_until(lambda: producer_finished(cluster), "the producer")
    queues = rmq_json(cluster, "topic", "describe", "orders")["queues"]
    assert sorted((q["broker_name"], q["queue_id"]) for q in queues) == [
        (broker, queue) for broker in ("broker-a", "broker-b") for queue in range(4)
    ]
    assert sum(q["max_offset"] - q["min_offset"] for q in queues) == PRODUCED


def test_etl_job_on_the_spark_cluster_writes_parquet_and_catches_up(cluster):
    wait_until(lambda: producer_finished(cluster), "the producer")
    wait_until(lambda: etl_rows(cluster) > 0, "Parquet output of the ETL job")
    wait_until(lambda: etl_caught_up(cluster), "the ETL job's consumer group to catch up")
