"""`make demo`: the whole path on one machine.

Starts an embedded broker on a temporary store, creates a topic with 8 queues, produces
20,000 JSON order events (tag = status, key = order id), runs a Spark streaming query over
`format("rmq")` to completion with Trigger.AvailableNow, prints the count and amount per
status and the consumer group's progress per queue. Exits 0 only when the group's lag is 0
and the Spark result matches what was produced. Everything it started (broker, Spark,
temporary store) is stopped and removed on the way out, also on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from examples.orders import order_events
from rmq.connector.client import MessageQueue, OutgoingMessage, RmqClient, RmqError
from testing import processes

TOPIC = "demo-orders"
GROUP = "rmq-demo"
QUEUES = 8
MESSAGES = 20_000
SEND_BATCH = 500
PROGRESS_EVERY = 5_000
MAX_MESSAGES_PER_TRIGGER = 5_000   # several micro-batches even under AvailableNow


def say(text: str) -> None:
    print(text, flush=True)


# ---------------------------------------------------------------- the embedded broker


def start_broker(work_dir: Path) -> processes.ServerProcess:
    """`rmq broker` as a child process in its own session (Ctrl-C reaches only the demo,
    which then stops the broker with SIGTERM: flush, persist offsets, exit); returns once it
    answers RouteService.ListBrokers (ARCHITECTURE.md §4)."""
    broker = processes.broker(work_dir, flush="async")
    broker.new_session = True
    try:
        return broker.start()
    except (RuntimeError, TimeoutError) as error:
        broker.stop()
        tail = "\n".join(broker.log().splitlines()[-20:])
        raise RuntimeError(f"{error}:\n{tail}") from None


def stop_broker(broker: processes.ServerProcess) -> None:
    say(f"broker stopped (exit code {broker.stop()})")


# ---------------------------------------------------------------- produce


@dataclass
class Produced:
    orders: Counter[str]
    amounts: Counter[str]


def produce(client: RmqClient) -> Produced:
    orders: Counter[str] = Counter()
    amounts: Counter[str] = Counter()
    batch: list[OutgoingMessage] = []
    sent = 0
    for event in order_events(MESSAGES, start_ms=int(time.time() * 1000) - MESSAGES * 1000):
        batch.append(OutgoingMessage(event.body(), event.status, event.order_id, {"source": "demo"}))
        orders[event.status] += 1
        amounts[event.status] += event.amount
        if len(batch) == SEND_BATCH:
            client.send(TOPIC, batch)
            sent, batch = sent + len(batch), []
            if sent % PROGRESS_EVERY == 0:
                say(f"  produced {sent:,} / {MESSAGES:,} messages")
    if batch:
        client.send(TOPIC, batch)
    return Produced(orders, amounts)


# ---------------------------------------------------------------- Spark


def start_spark():
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("rmq-demo")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")   # the listener prints progress
    )
    try:
        spark = builder.getOrCreate()
    except PySparkRuntimeError as error:
        # The JVM that PySpark launches can exit before it answers, without a word (seen now and
        # then on a busy 2-core machine); nothing of rmq runs yet, so it is started once more.
        if error.getCondition() != "JAVA_GATEWAY_EXITED":
            raise
        say("  Spark's JVM exited while starting (JAVA_GATEWAY_EXITED); starting it once more")
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # PySpark's SIGINT handler cancels jobs through py4j from inside the handler, re-entering a
    # busy py4j connection (tracebacks); the demo stops its query itself on KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from rmq.connector import register

    register(spark)
    return spark


def progress_listener():
    from pyspark.sql.streaming import StreamingQueryListener

    class PrintProgress(StreamingQueryListener):
        def onQueryStarted(self, event) -> None:
            say(f"  query started (id {event.id})")

        def onQueryProgress(self, event) -> None:
            progress = event.progress
            say(f"  micro-batch {progress.batchId}: {progress.numInputRows:,} messages "
                f"({progress.processedRowsPerSecond:,.0f} rows/s)")

        def onQueryIdle(self, event) -> None:
            pass

        def onQueryTerminated(self, event) -> None:
            say("  query finished" if event.exception is None else f"  query failed: {event.exception}")

    return PrintProgress()


def orders_by_status(spark, endpoints: str) -> list:
    """Streaming count and amount per status, run to completion (Trigger.AvailableNow)."""
    from pyspark.sql import functions as F

    orders = (
        spark.readStream.format("rmq")
        .option("endpoints", endpoints)
        .option("topic", TOPIC)
        .option("consumerGroup", GROUP)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", str(MAX_MESSAGES_PER_TRIGGER))
        .load()
    )
    parsed = orders.select(
        F.col("tags").alias("status"),
        F.from_json(F.col("body").cast("string"), "amount double").alias("order"),
    )
    aggregate = parsed.groupBy("status").agg(
        F.count("*").alias("orders"), F.round(F.sum("order.amount"), 2).alias("amount")
    )
    query = (
        aggregate.writeStream.outputMode("complete").format("memory").queryName("orders_by_status")
        .trigger(availableNow=True).start()
    )
    try:
        while query.isActive:   # polling: Ctrl-C lands in sleep(), not inside a py4j call
            time.sleep(0.2)
        if query.exception() is not None:
            raise query.exception()
    finally:
        query.stop()
    return spark.table("orders_by_status").orderBy("status").collect()


def check_aggregate(rows: list, produced: Produced) -> bool:
    say(f"\n{'status':<10} {'orders':>8} {'amount':>14}")
    for row in rows:
        say(f"{row.status:<10} {row.orders:>8,} {row.amount:>14,.2f}")
    counted = {row.status: row.orders for row in rows}
    summed = {row.status: row.amount for row in rows}
    matches = counted == dict(produced.orders) and all(
        abs(summed[status] - produced.amounts[status]) < 0.01 for status in produced.amounts
    )
    say(f"total      {sum(counted.values()):>8,}  "
        f"({'matches' if matches else 'DOES NOT match'} the {MESSAGES:,} produced)")
    return matches


# ---------------------------------------------------------------- consumer group progress


def print_group_progress(client: RmqClient, endpoints: str) -> int:
    """Per queue: broker offset, consumer offset, lag (like mqadmin consumerProgress);
    returns the total lag."""
    broker_offsets = client.topic_offsets(TOPIC)
    consumer_offsets = client.query_consumer_offsets(GROUP, TOPIC)
    say(f"\nconsumer group {GROUP} on {TOPIC} (also: rmq group progress {GROUP} --endpoints {endpoints})")
    say(f"{'broker':<12} {'queue':>5} {'broker offset':>14} {'consumer offset':>16} {'lag':>6}")
    total = 0
    for mq in sorted(broker_offsets, key=_queue_order):
        max_offset = broker_offsets[mq].max_offset
        consumer_offset = consumer_offsets.get(mq)
        lag = max_offset - (consumer_offset if consumer_offset is not None else broker_offsets[mq].min_offset)
        total += lag
        shown = "-" if consumer_offset is None else f"{consumer_offset:,}"
        say(f"{mq.broker_name:<12} {mq.queue_id:>5} {max_offset:>14,} {shown:>16} {lag:>6,}")
    say(f"total lag {total}")
    return total


def _queue_order(mq: MessageQueue) -> tuple[str, int]:
    return mq.broker_name, mq.queue_id


# ---------------------------------------------------------------- main


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(stack: contextlib.ExitStack) -> int:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    work_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rmq-demo-")))
    stack.callback(say, f"temporary store {work_dir} removed")

    say("1/5 starting an embedded broker on a temporary store")
    broker = start_broker(work_dir)
    stack.callback(stop_broker, broker)
    client = RmqClient(broker.address, timeout=10.0)
    stack.callback(client.close)
    say(f"  broker ready at {broker.address} (pid {broker.process.pid}, store {work_dir / 'broker-a'})")

    say(f"2/5 creating topic {TOPIC} with {QUEUES} queues")
    client.create_topic(TOPIC, queues=QUEUES)

    say(f"3/5 producing {MESSAGES:,} order events (tag = status, key = order id)")
    produced = produce(client)

    say("4/5 running a Spark streaming query over format('rmq') with Trigger.AvailableNow")
    spark = start_spark()
    stack.callback(say, "Spark stopped")
    stack.callback(spark.stop)
    spark.streams.addListener(progress_listener())
    matches = check_aggregate(orders_by_status(spark, broker.address), produced)

    say("\n5/5 consumer group progress")
    lag = print_group_progress(client, broker.address)
    ok = matches and lag == 0
    say("\ndemo OK: every message consumed, lag 0" if ok else "\ndemo FAILED")
    return 0 if ok else 1


def main() -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        with contextlib.ExitStack() as stack:
            return run(stack)
    except KeyboardInterrupt:
        say("interrupted: everything the demo started has been stopped")
        return 130
    except (RmqError, RuntimeError) as error:
        say(f"demo failed: {error}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
