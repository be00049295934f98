"""The benchmark's statistics, table and report code (no timing: no process is started)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from bench import report
from bench.harness import (
    Row,
    Stats,
    Target,
    format_number,
    format_table,
    measure_pair,
    not_measured,
    percentile,
)


def test_stats_median_and_spread() -> None:
    assert Stats.of([3.0, 1.0, 2.0]) == Stats(median=2.0, low=1.0, high=3.0, runs=3)
    assert Stats.of([4.0, 1.0, 2.0, 3.0]).median == 2.5
    with pytest.raises(ValueError):
        Stats.of([])


def test_percentile_is_nearest_rank() -> None:
    samples = [float(n) for n in range(100, 0, -1)]   # 1..100, unordered
    assert percentile(samples, 0.50) == 50.0
    assert percentile(samples, 0.99) == 99.0
    assert percentile(samples, 1.0) == 100.0
    assert percentile([7.0], 0.99) == 7.0


def test_measure_pair_alternates_subject_and_reference() -> None:
    calls: list[str] = []

    def subject() -> float:
        calls.append("rmq")
        return 2.0

    def reference() -> float:
        calls.append("ref")
        return 4.0

    mine, theirs = measure_pair(subject, reference, 3)
    assert calls == ["rmq", "ref"] * 3
    assert (mine.median, theirs.median, mine.runs) == (2.0, 4.0, 3)
    assert measure_pair(subject, None, 2)[1] is None


def test_ratio_and_verdict_against_targets() -> None:
    fast = Row("produce", "msg/s", Stats.of([150.0]), "XADD", Stats.of([100.0]), Target(min_ratio=1.0))
    slow = Row("pull", "msg/s", Stats.of([50.0]), "XRANGE", Stats.of([100.0]), Target(min_ratio=1.0))
    latency = Row("p99", "ms", Stats.of([6.0]), "XREAD", Stats.of([0.3]), Target(max_value=5.0, unit="ms"))
    assert fast.ratio == 1.5 and fast.verdict == "met"
    assert slow.ratio == 0.5 and slow.verdict == "**missed**"
    assert latency.verdict == "**missed**"
    bounded = Row("memory", "MiB", Stats.of([82.0]), "1/8 range", Stats.of([68.0]), Target(max_ratio=2.0))
    assert bounded.verdict == "met" and Target(max_ratio=2.0).describe() == "≤ 2× reference"
    missing = not_measured("e2e", "connector not available", Target(min_ratio=0.6))
    assert missing.ratio is None and missing.verdict == "—"


def test_number_formatting() -> None:
    assert format_number(1_234_567) == "1.23M"
    assert format_number(123_456) == "123K"
    assert format_number(1_234) == "1,234"
    assert format_number(0.1834) == "0.183"


def test_table_keeps_every_row_on_one_line() -> None:
    rows = [
        Row("produce", "msg/s", Stats.of([1.0, 2.0, 3.0]), "XADD", Stats.of([2.0, 2.0, 2.0]),
            Target(min_ratio=1.0)),
        not_measured("pull", "RuntimeError: broker exited\nTraceback | line 2"),
    ]
    lines = format_table(rows).splitlines()
    assert len(lines) == 4
    assert "| produce | 2 msg/s (1–3) | XADD | 2 msg/s (2–2) | 1.00× | ≥ 1× reference | met |" == lines[2]
    assert "not measured: RuntimeError: broker exited Traceback \\| line 2" in lines[3]


def test_report_is_generated_whole_and_names_the_commit() -> None:
    section = report.SectionResult("pull", "3. Broker pull", "What it measures.",
                                   [Row("pull", "msg/s", Stats.of([5.0]), "XRANGE", Stats.of([10.0]),
                                        Target(min_ratio=1.0))], 12.0)
    run = report.RunInfo("make bench", "2026-01-01 00:00", 60.0, False, "commit abc1234",
                         {"source": "commit abc1234", "cores": "2"})
    text = report.render([section], run)
    assert text.splitlines()[2].startswith("Measured at commit abc1234 by make bench on 2026-01-01 00:00 UTC")
    assert "| 3. Broker pull | pull | 5 msg/s | 0.50× | ≥ 1× reference | **missed** |" in text
    assert "notes:" not in text


def test_report_ends_with_the_hand_written_notes() -> None:
    run = report.RunInfo("make bench", "2026-01-01 00:00", 60.0, False, "commit abc1234", {})
    text = report.render([], run)
    notes = report.NOTES.read_text().strip()
    assert notes.startswith("## ")
    assert text.endswith(notes + "\n")


def _failing_section(env) -> list[Row]:
    """A section whose broker cannot start."""
    raise RuntimeError("server at 127.0.0.1:1 exited with code 1")


def test_a_failing_or_late_section_becomes_a_not_measured_row() -> None:
    from bench.__main__ import BUDGET_S, Benchmark, run_section
    from bench.environment import Environment, Scale

    benchmark = Benchmark("pull", "3. Broker pull", f"{__name__}:_failing_section", Target(min_ratio=1.0))
    env = Environment(Scale.quick())
    try:
        failed = run_section(benchmark, env, start=time.monotonic())
        late = run_section(benchmark, env, start=time.monotonic() - BUDGET_S - 1)
    finally:
        env.close()
    (row,) = failed.rows
    assert row.value is None and row.verdict == "—"
    assert row.note == "not measured: RuntimeError: server at 127.0.0.1:1 exited with code 1"
    assert failed.description == "A section whose broker cannot start."
    assert late.rows[0].note == f"not measured: over the {BUDGET_S // 60}-minute budget"


def test_a_minimum_value_target_is_met_at_or_above_it() -> None:
    target = Target(min_value=8000, unit="msg/s")
    assert target.describe() == "≥ 8,000 msg/s"
    assert Row("C++ send_sync", "msg/s", Stats.of([8000.0]), target=target).verdict == "met"
    assert Row("C++ send_sync", "msg/s", Stats.of([7999.0]), target=target).verdict == "**missed**"


def test_one_message_senders_are_four_processes_of_threads_beyond_one() -> None:
    from bench.one_message_bench import Senders
    shapes = {n: (Senders(n).processes, Senders(n).threads) for n in (1, 8, 32, 128)}
    assert shapes == {1: (1, 1), 8: (4, 2), 32: (4, 8), 128: (4, 32)}
    assert Senders(32).label() == "32 senders (4 processes × 8 threads)"


def test_one_message_kinds_alternate_and_a_failing_kind_keeps_the_others() -> None:
    from bench.one_message_bench import Measured, alternate
    calls: list[str] = []

    def run(name: str, fails_on: int = 0):
        def timed() -> tuple[float, float]:
            calls.append(name)
            if calls.count(name) == fails_on:
                raise RuntimeError("the C++ client did not start")
            return 1000.0 * calls.count(name), 50.0
        return timed

    outcomes = alternate({"send": run("send"), "cpp": run("cpp", fails_on=2), "rocketmq5": "not installed",
                          "redis": run("redis")}, 3)
    assert calls == ["send", "cpp", "redis", "send", "cpp", "redis", "send", "redis"]
    assert outcomes["cpp"] == "RuntimeError: the C++ client did not start"
    assert outcomes["rocketmq5"] == "not installed"
    send = outcomes["send"]
    assert isinstance(send, Measured) and send.rate == Stats(2000.0, 1000.0, 3000.0, 3)


def test_one_sender_rows_carry_issue_41s_targets_against_redis() -> None:
    from bench.environment import Environment, Scale
    from bench.one_message_bench import Measured, one_sender_rows

    def measured(rate: float, cpu_us: float) -> Measured:
        return Measured(Stats.of([rate]), Stats.of([cpu_us]))

    env = Environment(Scale.quick())
    try:
        rows = one_sender_rows({"send": measured(2000, 30), "send_async": measured(25000, 30),
                                "cpp": measured(8000, 45), "rocketmq5": "not installed",
                                "redis": measured(10000, 20), "nats": measured(4000, 60)}, env)
    finally:
        env.close()
    by_name = {row.name.split(",")[0].split(" (")[0]: row for row in rows}
    cpp = by_name["official 4.x C++ client send_sync"]
    assert (cpp.reference_name, cpp.ratio, cpp.verdict) == ("redis-py XADD, no pipeline, 1 sender", 0.8,
                                                            "met")
    send = by_name["Producer.send(Message)"]
    assert by_name["Producer.send_async(Message)"].verdict == "met"   # 2.5× one redis-py client
    assert send.verdict == "—"                                         # the 1.0× goal is for 32
    assert "NATS JetStream publish awaited, same senders: 4,000 msg/s" in send.note
    cpu = {row.name.removeprefix("broker CPU per single-message send "): row.verdict
           for row in rows if row.name.startswith("broker CPU")}
    assert cpu == {"(SDK over the remoting port)": "met",   # ≤ 40 µs
                   "(official C++ client over the remoting port)": "**missed**",
                   "(official RocketMQ 5 client over gRPC)": "—"}
    assert by_name["official RocketMQ 5 Python client Producer.send"].note == "not measured: not installed"


def test_per_request_cost_puts_other_threads_cpu_apart_from_the_loop_thread_s() -> None:
    """`bench.per_request_cost` says which threads of a server burn the CPU spent per request:
    a helper thread's work is counted as its own, not as the main (event-loop) thread's."""
    from bench.per_request_cost import cpu_line, timed

    go, burned, done = threading.Event(), threading.Event(), threading.Event()

    def burn() -> None:   # alive until measured: /proc forgets an ended thread's CPU
        go.wait(10)   # burns only inside `run`, after timed() took its first snapshots
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass
        burned.set()
        done.wait(10)

    helper = threading.Thread(target=burn)
    helper.start()

    def run() -> None:
        go.set()
        burned.wait(10)

    try:
        spent = timed(os.getpid(), run, None)
    finally:
        go.set()
        done.set()
        helper.join()
    assert sum(spent.other_threads.values()) >= 0.2   # /proc counts in 10 ms ticks
    assert spent.loop < 0.1
    assert spent.voluntary >= 1   # the main thread waited for the helper
    assert "other threads: thread " in cpu_line("kind", 1, spent)


def test_the_flight_floor_gathers_each_queue_in_order_from_commit_log_shaped_records(tmp_path: Path) -> None:
    """Row 5's gathered floor (`bench.flight_floor`) reads the rows a query of 3 columns gets from
    rmq: each queue's offsets from 0 up, its own queue id and the stored bodies, across its
    batches; the queues' records take turns one by one in the file, as rmq's broker stores them."""
    from bench.flight_floor import BATCH_ROWS, GatheredStore, layout, write_records
    from rmq.record_batch import schema_of

    assert [list(column) for column in layout(7, 3)] == [[0, 1, 2] * 3, [0, 0, 0, 1, 1, 1, 2, 2, 2]]
    share, queues = BATCH_ROWS + 5, 3
    path = tmp_path / "records"
    template = pa.RecordBatch.from_pylist([], schema=schema_of(("queue_id", "queue_offset", "body")))
    store = GatheredStore(path, write_records(path, share * queues, queues, body_size=7), template)
    for queue in range(queues):
        batches = list(store.batches(queue, share))
        assert [batch.num_rows for batch in batches] == [BATCH_ROWS, share - BATCH_ROWS]
        offsets = [offset for batch in batches for offset in batch.column("queue_offset").to_pylist()]
        assert offsets == list(range(share))
        assert {value for batch in batches for value in batch.column("queue_id").to_pylist()} == {queue}
        assert {value for batch in batches for value in batch.column("body").to_pylist()} == {b"x" * 7}


def test_the_flight_floor_gathers_the_default_schema_s_columns_as_rmq_decodes_them(tmp_path: Path) -> None:
    """The gathered floor of the default schema answers every column as rmq's decoder reads the
    same records: its rows cost what a real answer costs, not less."""
    from bench.flight_floor import GatheredStore, write_records
    from rmq.record_batch import SCHEMA, decode_records

    queues, share = 2, 5
    path = tmp_path / "records"
    written = write_records(path, share * queues, queues, body_size=9)
    records = np.fromfile(path, dtype=np.uint8)
    size = len(records) // len(written)
    template = pa.RecordBatch.from_pylist([{"broker_name": "broker-a"}], schema=SCHEMA)
    store = GatheredStore(path, written, template)
    for queue in range(queues):
        [batch] = store.batches(queue, share)
        rows = np.flatnonzero(written == queue)
        stored = np.concatenate([records[row * size:(row + 1) * size] for row in rows])
        expected = decode_records(stored, np.full(len(rows), size, dtype=np.int64), "broker-a")
        assert batch.schema == SCHEMA
        assert batch.to_pylist() == expected.to_pylist()
