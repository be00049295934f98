"""Fixtures for end-to-end tests: real broker / name server processes and one local Spark
session for the whole test session (starting Spark costs seconds, so never per test)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testing import processes


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
