"""A Spark driver in its own process for the driver-crash scenario: runs the reliability
streaming query (rmq -> parquet with a checkpoint) until killed, or with `--available-now`
reads everything available and exits 0.

    python -m integration_tests.reliability.spark_query_job ENDPOINTS TOPIC GROUP CHECKPOINT OUTPUT
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import SparkSession

from integration_tests.reliability.streaming import start_query
from rmq.connector import register


def main() -> int:
    parser = argparse.ArgumentParser()
    for name in ("endpoints", "topic", "group", "checkpoint", "output"):
        parser.add_argument(name)
    parser.add_argument("--max-messages-per-trigger", default="500")
    parser.add_argument("--available-now", action="store_true")
    args = parser.parse_args()

    os.environ["PYSPARK_PYTHON"] = os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    spark = (SparkSession.builder.master("local[2]").appName("rmq-driver-crash")
             .config("spark.sql.shuffle.partitions", "2").config("spark.ui.enabled", "false")
             .getOrCreate())
    register(spark)
    query = start_query(spark, args.endpoints, args.topic, args.group, args.checkpoint, args.output,
                        trigger_seconds=0.5, available_now=args.available_now,
                        maxMessagesPerTrigger=args.max_messages_per_trigger)
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
