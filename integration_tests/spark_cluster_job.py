"""Driver of test_spark_cluster.py, run in its own process against a standalone master:

    python spark_cluster_job.py --master spark://127.0.0.1:P --endpoints HOST:PORT \\
        --source TOPIC --target TOPIC --work-dir DIR

Each line read from stdin runs one round of two AvailableNow queries, both restarted from
their checkpoints under DIR: `forward` reads the source topic with `format("rmq")` and writes
body/tags/keys to the target topic with the `rmq` sink; `files` reads the target topic and
appends its rows to Parquet (DIR/output, a file sink). Both admit a few messages per trigger,
so a round spans several micro-batches. One JSON line per round on stdout: the input rows of
each micro-batch of each query and the executors of the application. Stdin closed: exits."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from rmq.connector import register

PER_TRIGGER = "10"


def session(master: str) -> SparkSession:
    return (
        SparkSession.builder.master(master).appName("rmq-cluster-test")
        .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "512m").config("spark.executor.cores", "2")
        # the executors' JVMs run with the driver's test options (integration_tests/conftest.py)
        .config("spark.executor.extraJavaOptions", os.environ.get("SPARK_SUBMIT_OPTS", ""))
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
        .getOrCreate()
    )


def rmq_stream(spark: SparkSession, endpoints: str, topic: str) -> DataFrame:
    return (spark.readStream.format("rmq").option("endpoints", endpoints).option("topic", topic)
            .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", PER_TRIGGER).load())


def run(writer: DataStreamWriter, checkpoint: Path) -> list[int]:
    """Runs the query to its end (AvailableNow); the input rows of each of its micro-batches."""
    query: StreamingQuery = (writer.option("checkpointLocation", str(checkpoint))
                             .trigger(availableNow=True).start())
    query.awaitTermination()
    return [progress.numInputRows for progress in query.recentProgress if progress.numInputRows]


def executor_ids(spark: SparkSession) -> list[str]:
    """The application's executors (the driver is not among them)."""
    ids = spark.sparkContext._jsc.sc().getExecutorIds().mkString(",")
    return sorted(filter(None, ids.split(",")))


def one_round(spark: SparkSession, args: argparse.Namespace) -> dict[str, list]:
    forward = (rmq_stream(spark, args.endpoints, args.source).select("body", "tags", "keys")
               .writeStream.format("rmq").option("endpoints", args.endpoints).option("topic", args.target))
    files = (rmq_stream(spark, args.endpoints, args.target)
             .writeStream.format("parquet").option("path", str(args.work_dir / "output")))
    return {
        "forward": run(forward, args.work_dir / "forward-checkpoint"),
        "files": run(files, args.work_dir / "files-checkpoint"),
        "executors": executor_ids(spark),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    for name in ("--master", "--endpoints", "--source", "--target"):
        parser.add_argument(name, required=True)
    parser.add_argument("--work-dir", type=Path, required=True)
    args = parser.parse_args(argv)
    spark = session(args.master)
    register(spark)
    try:
        for _ in sys.stdin:
            print(json.dumps(one_round(spark, args)), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
