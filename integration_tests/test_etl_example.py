"""`examples/streaming_etl.py` against a real broker: the Parquet output holds exactly the
closed windows, and a second run on the same checkpoint resumes (no window written twice,
later windows added). `make test` runs the job's `run` in the test session's Spark; the whole
script under `spark-submit` from the installed PySpark (a JVM per run) is a `slow` test,
run by `make test-slow`."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

from examples import streaming_etl
from examples.orders import OrderEvent, order_events
from rmq.connector.client import OutgoingMessage, RmqClient

pytestmark = [pytest.mark.integration, pytest.mark.spark]

ROOT = Path(__file__).resolve().parent.parent
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"
TOPIC = "etl-orders"
START_MS = 1_700_000_040_000   # a whole minute
MINUTE_MS = 60_000
WATERMARK_MS = MINUTE_MS
EVENTS = list(order_events(1200, START_MS, step_ms=1000))   # 20 minutes of event time


def etl_arguments(endpoints: str, output: Path, checkpoint: Path) -> list[str]:
    return ["--endpoints", endpoints, "--topic", TOPIC, "--group", "etl-test", "--output", str(output),
            "--checkpoint", str(checkpoint), "--window", "1 minute", "--watermark", "1 minute",
            "--trigger-available-now"]


def spark_submit_etl(endpoints: str, output: Path, checkpoint: Path) -> None:
    command = [
        str(SPARK_SUBMIT), "--master", "local[2]",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.sql.shuffle.partitions=2",
        str(ROOT / "examples" / "streaming_etl.py"), *etl_arguments(endpoints, output, checkpoint),
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr[-5000:]


def closed_windows(events: list[OrderEvent]) -> dict[tuple[int, str], tuple[int, float]]:
    """(window start ms, status) -> (orders, amount) for the windows the watermark closed."""
    watermark = max(e.ts for e in events) - WATERMARK_MS
    orders: Counter = Counter()
    amounts: Counter = Counter()
    for event in events:
        start = event.ts - event.ts % MINUTE_MS
        if start + MINUTE_MS <= watermark:
            orders[start, event.status] += 1
            amounts[start, event.status] += event.amount
    return {key: (orders[key], round(amounts[key], 6)) for key in orders}


def written_windows(output: Path) -> list[tuple[int, str, int, float]]:
    table = ds.dataset(output, format="parquet").to_table()
    # Spark writes UTC instants (INT96 by default): as epoch milliseconds
    starts = pc.cast(pc.cast(table["window_start"], pa.timestamp("ms")), pa.int64()).to_pylist()
    return sorted(zip(starts, table["status"].to_pylist(), table["orders"].to_pylist(),
                      [round(a, 6) for a in table["amount"].to_pylist()], strict=True))


def send(client: RmqClient, events: list[OrderEvent]) -> None:
    client.send(TOPIC, [OutgoingMessage(e.body(), e.status, e.order_id) for e in events])


def as_rows(expected: dict[tuple[int, str], tuple[int, float]]) -> list[tuple[int, str, int, float]]:
    return sorted((start, status, count, amount) for (start, status), (count, amount) in expected.items())


def writes_closed_windows_and_resumes(endpoints: str, tmp_path: Path,
                                      run_etl: Callable[[str, Path, Path], None]) -> None:
    output, checkpoint = tmp_path / "orders_per_minute", tmp_path / "checkpoint"
    with RmqClient(endpoints) as client:
        client.create_topic(TOPIC, queues=4)
        first, second = EVENTS[:600], EVENTS[600:]
        send(client, first)
        run_etl(endpoints, output, checkpoint)
        after_first = written_windows(output)
        assert after_first == as_rows(closed_windows(first))
        assert {start for start, *_ in after_first} == {START_MS + k * MINUTE_MS for k in range(8)}

        send(client, second)
        run_etl(endpoints, output, checkpoint)
        assert written_windows(output) == as_rows(closed_windows(EVENTS))   # each window once


def test_etl_job_writes_closed_windows_and_resumes_from_its_checkpoint(broker, spark, tmp_path: Path):
    def in_session(endpoints: str, output: Path, checkpoint: Path) -> None:
        streaming_etl.run(spark, streaming_etl.parse_args(etl_arguments(endpoints, output, checkpoint)))

    writes_closed_windows_and_resumes(broker.address, tmp_path, in_session)


@pytest.mark.slow
def test_etl_script_under_spark_submit_writes_closed_windows_and_resumes(broker, tmp_path: Path):
    writes_closed_windows_and_resumes(broker.address, tmp_path, spark_submit_etl)
