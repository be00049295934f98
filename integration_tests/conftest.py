"""Fixtures for end-to-end tests: real broker / name server processes and one local Spark
session for the whole test session (starting Spark costs seconds, so never per test); the hooks
that print the reliability figures at the end of the run and write RELIABILITY.md (with the run's
outcome) when RMQ_RELIABILITY_REPORT=1 (`make reliability`); normal test runs leave the file alone.
Under pytest-xdist (`make test`) the workers' figures reach the controller (pytest_testnodedown)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration_tests.reliability.report import REPORT, RunOutcome
from testing import processes

STARTED = time.monotonic()     # conftest import: the start of the session's collection
# The JVMs the tests start (the Spark session, the drivers, Master, Worker and Connect server
# they run in processes of their own) do little work each, on small data: C2's compilations and
# G1's concurrent threads do not pay back their CPU on 2 cores. C1 alone and the serial collector
# halve a local Spark session's start (JVM CPU 21.6 -> 10.7 s), and a session kept for 23 tests
# (test_sink.py + test_spark_source.py) is quicker too (CPU 227 -> 190 s). Only the JIT tier and
# the collector change, not what Spark computes.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def pytest_configure(config: pytest.Config) -> None:
    """Every JVM started from here on gets TEST_JVM_OPTIONS: spark-submit (the session, the driver
    scripts, the Connect server) reads SPARK_SUBMIT_OPTS, a standalone Master and Worker
    SPARK_DAEMON_JAVA_OPTS; a standalone cluster's executors get them from the driver's conf
    (spark_cluster_job.py)."""
    for name in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
        given = os.environ.get(name, "")
        if TEST_JVM_OPTIONS not in given:     # an xdist worker inherits the controller's
            os.environ[name] = f"{given} {TEST_JVM_OPTIONS}".strip()


@pytest.hookimpl(optionalhook=True)     # a pytest-xdist hook, called in the controller
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` (make test) hands out the files of integration_tests/ before those of
    tests/. xdist's own order is by test count, so the single-test scenarios of a minute or two
    (driver crash, standalone cluster, soak, ...) came last, one running and one queued per
    worker: the run ended with one worker idle while the other finished them. Now the many
    short files of tests/ come last and even out the two workers' ends."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class IntegrationFilesFirst(LoadFileScheduling):
        ordered = False

        def _assign_work_unit(self, node: Any) -> None:
            if not self.ordered:     # the first call: schedule() has just built the queue
                units = sorted(self.workqueue.items(),
                               key=lambda unit: not unit[0].startswith("integration_tests/"))
                self.workqueue.clear()
                self.workqueue.update(units)
                self.ordered = True
            super()._assign_work_unit(node)

    return IntegrationFilesFirst(config, log)


@pytest.hookimpl(optionalhook=True)     # a pytest-xdist hook, called in the controller
def pytest_testnodedown(node: Any, error: object) -> None:
    figures = getattr(node, "workeroutput", {}).get("reliability")
    if figures:
        REPORT.merge(figures)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):     # a pytest-xdist worker: its figures went to the controller
        return
    if REPORT.scenarios:
        terminalreporter.section("reliability figures")
        for line in REPORT.lines():
            terminalreporter.write_line(line)
    stats = terminalreporter.stats
    counts = {name: len(stats.get(name, [])) for name in ("passed", "failed", "error", "skipped")}
    skipped = sorted({f"{report.nodeid.split('::')[-1]}: {report.longrepr[2]}"
                      for report in stats.get("skipped", []) if isinstance(report.longrepr, tuple)})
    seconds = time.monotonic() - STARTED
    REPORT.write_if_requested(RunOutcome({k: v for k, v in counts.items() if v}, skipped, seconds))


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[processes.ServerProcess]:
    """A single embedded-default broker (no name server), sync flush."""
    server = processes.broker(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture
def namesrv(tmp_path: Path) -> Iterator[processes.ServerProcess]:
    server = processes.namesrv(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture(params=["all-columns", "3-columns"])
def columns(request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The columns of the query a source test reads: the full schema, and a schema naming three
    (the broker and the executor then build only those; offsets, filters, replay and data loss
    must behave the same)."""
    from integration_tests.spark_source_support import NARROW_COLUMNS
    from rmq.connector.spark.source_schema import ALL_COLUMNS
    return ALL_COLUMNS if request.param == "all-columns" else NARROW_COLUMNS


@pytest.fixture(scope="session")
def spark():
    """One local Spark session with the `rmq` data source registered."""
    pytest.importorskip("pyspark")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("rmq-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    from rmq.connector import register

    register(session)
    yield session
    session.stop()
