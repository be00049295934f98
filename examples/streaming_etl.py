"""Streaming ETL job for spark-submit: rmq -> JSON parsing -> windowed aggregate -> Parquet.

    spark-submit examples/streaming_etl.py --endpoints 127.0.0.1:9876 --topic orders \\
        --output /data/orders_per_minute [--checkpoint DIR] [--group GROUP] \\
        [--window "1 minute"] [--watermark "1 minute"] [--trigger-available-now]

Reads JSON order events (`{"order_id", "customer", "status", "amount", "ts"}`, `ts` in epoch
milliseconds, as `examples/orders.py` produces them), counts orders and sums amounts per
status and event-time window, and appends each window to Parquet once the watermark has
passed its end (late events beyond the watermark are dropped). The checkpoint makes restarts
resume where the job stopped. Without --trigger-available-now it runs until stopped.
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from rmq.connector import register

ORDER_SCHEMA = "order_id string, customer string, status string, amount double, ts long"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="streaming_etl.py", description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", required=True, help="name server(s) or broker(s): host:port[,…]")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--output", required=True, help="Parquet output directory")
    parser.add_argument("--checkpoint", help="checkpoint directory (default: <output>/_checkpoint)")
    parser.add_argument("--group", default="rmq-streaming-etl", help="consumer group")
    parser.add_argument("--window", default="1 minute", help="event-time window length")
    parser.add_argument("--watermark", default="1 minute", help="how late an event may arrive")
    parser.add_argument("--starting-offsets", default="earliest", help="earliest, latest, committed, ...")
    parser.add_argument("--trigger-available-now", action="store_true",
                        help="process everything available now, then stop")
    parser.add_argument("--processing-time", default="10 seconds", help="micro-batch interval otherwise")
    return parser.parse_args(argv)


def orders_per_window(orders: DataFrame, window: str, watermark: str) -> DataFrame:
    """Per status and event-time window: orders, amount; emitted once the window closed."""
    events = (
        orders.select(F.from_json(F.col("body").cast("string"), ORDER_SCHEMA).alias("order"))
        .select("order.*")
        .where(F.col("ts").isNotNull())
        .withColumn("event_time", F.timestamp_millis("ts"))
        .withWatermark("event_time", watermark)
    )
    return (
        events.groupBy(F.window("event_time", window), "status")
        .agg(F.count("*").alias("orders"), F.sum("amount").alias("amount"))
        .select(
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "status",
            "orders",
            "amount",
        )
    )


def run(spark: SparkSession, args: argparse.Namespace) -> None:
    """Run the job on `spark` (with the rmq source registered) until it is stopped, or with
    --trigger-available-now until everything available now is written."""
    checkpoint = args.checkpoint or os.path.join(args.output, "_checkpoint")
    orders = (
        spark.readStream.format("rmq")
        .option("endpoints", args.endpoints)
        .option("topic", args.topic)
        .option("consumerGroup", args.group)
        .option("startingOffsets", args.starting_offsets)
        .load()
    )
    writer = (
        orders_per_window(orders, args.window, args.watermark)
        .writeStream.format("parquet")
        .outputMode("append")
        .option("path", args.output)
        .option("checkpointLocation", checkpoint)
    )
    if args.trigger_available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.processing_time)
    query = writer.start()
    try:
        query.awaitTermination()
    finally:
        query.stop()


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    spark = SparkSession.builder.appName("rmq-streaming-etl").getOrCreate()
    register(spark)   # a spark-submit job runs in a fresh JVM: register the source here
    try:
        run(spark, args)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
