"""Spark Connect client of test_spark_connect.py, run in its own process (the test session
holds a classic SparkContext, and a process is either a classic or a Connect client):

    python spark_connect_client.py --remote sc://127.0.0.1:PORT --endpoints HOST:PORT --topic TOPIC

Registers the `rmq` data source from the client (the documented `register(spark)`), then for
each line read from stdin runs an AvailableNow streaming query over `format("rmq")` (a few
messages per trigger) into a memory sink, and prints one JSON line: the session's class, the
input rows of each micro-batch and the rows the query wrote (queue_id, queue_offset, body).
Stdin closed: exits."""

from __future__ import annotations

import argparse
import json
import sys

from pyspark.sql import SparkSession

from rmq.connector import register

TABLE = "rmq_rows"
PER_TRIGGER = "10"


def read_available(spark: SparkSession, args: argparse.Namespace) -> dict[str, object]:
    query = (
        spark.readStream.format("rmq").option("endpoints", args.endpoints).option("topic", args.topic)
        .option("startingOffsets", "earliest").option("maxMessagesPerTrigger", PER_TRIGGER).load()
        .select("queue_id", "queue_offset", "body")
        .writeStream.format("memory").queryName(TABLE).outputMode("append")
        .trigger(availableNow=True).start()
    )
    query.awaitTermination()
    rows = spark.table(TABLE).collect()
    return {
        "session": f"{type(spark).__module__}.{type(spark).__name__}",
        "batches": [progress.numInputRows for progress in query.recentProgress if progress.numInputRows],
        "rows": [[row.queue_id, row.queue_offset, bytes(row.body).decode()] for row in rows],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    for name in ("--remote", "--endpoints", "--topic"):
        parser.add_argument(name, required=True)
    args = parser.parse_args(argv)
    spark = SparkSession.builder.remote(args.remote).getOrCreate()
    register(spark)
    try:
        for _ in sys.stdin:
            print(json.dumps(read_available(spark, args)), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
