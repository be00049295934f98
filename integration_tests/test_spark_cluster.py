"""The `rmq` source and sink on a Spark standalone cluster started from the installed PySpark:
a Master and a Worker process, executors launched by the worker, the driver in a process of
its own (integration_tests/spark_cluster_job.py). Two AvailableNow rounds, messages produced
between them: rmq -> rmq sink -> rmq -> Parquet holds every message exactly once."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from integration_tests.spark_processes import ScriptProcess, spark_env, standalone_cluster
from integration_tests.spark_source_support import produce, wait_dispatched
from rmq.connector.client import RmqClient
from testing.processes import ServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.spark]

JOB = Path(__file__).with_name("spark_cluster_job.py")
PER_ROUND = 20   # 2 x maxMessagesPerTrigger (10): each round spans several micro-batches


def committed_files(output: Path) -> list[Path]:
    """The files a file sink committed: the paths in its log (_spark_metadata/<batch>), not
    whatever lies in the directory."""
    paths = []
    for entry in sorted((output / "_spark_metadata").iterdir()):
        if entry.name.isdigit():
            lines = entry.read_text().splitlines()[1:]   # after the version line "v1"
            paths += [Path(json.loads(line)["path"].removeprefix("file:")) for line in lines]
    return paths


def test_source_and_sink_on_a_standalone_cluster_exactly_once_across_micro_batches(
        broker: ServerProcess, tmp_path: Path) -> None:
    with RmqClient(broker.address) as client:
        client.create_topic("cluster-in", queues=2)
        client.create_topic("cluster-out", queues=2)
        sent = produce(client, "cluster-in", PER_ROUND)
        wait_dispatched(client, "cluster-in", PER_ROUND)
    work = tmp_path / "job"
    job_args = ["--endpoints", broker.address, "--source", "cluster-in", "--target", "cluster-out",
                "--work-dir", str(work)]
    with standalone_cluster(tmp_path / "spark") as cluster:
        driver = ScriptProcess(JOB, ["--master", cluster.url, *job_args], tmp_path / "driver.log",
                               spark_env(tmp_path / "spark"))
        try:
            first = driver.ask("round")
            with RmqClient(broker.address) as client:
                sent += produce(client, "cluster-in", PER_ROUND, start=PER_ROUND)
                wait_dispatched(client, "cluster-in", 2 * PER_ROUND)
            second = driver.ask("round")
            assert cluster.alive_workers() == 1
        finally:
            assert driver.finish() == 0, (tmp_path / "driver.log").read_text(errors="replace")[-4000:]
    for answer in (first, second):
        assert answer["executors"], answer            # tasks ran in executors, not in the driver
        assert sum(answer["forward"]) == sum(answer["files"]) == PER_ROUND, answer
        assert len(answer["forward"]) >= 2 and len(answer["files"]) >= 2, answer   # micro-batch boundaries
    launched = list((tmp_path / "spark" / "worker").glob("app-*/*/stderr"))
    assert launched, "the worker launched no executor"
    with RmqClient(broker.address) as client:
        assert sum(o.max_offset for o in client.topic_offsets("cluster-out").values()) == 2 * PER_ROUND
    rows = pq.ParquetDataset(committed_files(work / "output")).read(
        columns=["queue_id", "queue_offset", "body"])
    positions = list(zip(rows["queue_id"].to_pylist(), rows["queue_offset"].to_pylist(), strict=True))
    assert len(set(positions)) == len(positions) == 2 * PER_ROUND                 # no duplicate
    assert sorted(rows["body"].to_pylist()) == sorted(sent)                          # no gap
