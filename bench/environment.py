"""What every benchmark runs in: the sizes of this run (full or --quick), a scratch
directory, and the processes it starts (brokers, name server, Redis, one Spark session),
each stopped when the benchmark that started it ends, even on error."""

from __future__ import annotations

import compileall
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from bench.nats_reference import NatsServer, NatsUnavailable
from bench.redis_reference import RedisServer, RedisUnavailable
from testing import processes

REPO_ROOT = Path(__file__).resolve().parent.parent


# What Spark's Python processes import from this checkout: the rmq source (and the modules it uses)
# and the reference and floor sources.
SPARK_SIDE_SOURCES = ("connector", "proto/rmq", "bench")


def _compile_spark_side_sources() -> None:
    """Write the bytecode of SPARK_SIDE_SOURCES, as `pip install` of the wheel does. Spark starts a
    fresh Python process per streaming query (the source runner) that imports the source's modules;
    an editable checkout has no bytecode, and with PYTHONDONTWRITEBYTECODE set (as in the shells
    these benchmarks ran in) every such process would compile rmq's ~50 modules from source again:
    ≈ 0.1 s of CPU per query that a deployment does not pay (bench/NOTES.md, "Spark ingest, eighth
    pass"). A module changed later is compiled from source as before (its bytecode records the
    source's mtime)."""
    for package in SPARK_SIDE_SOURCES:
        compileall.compile_dir(REPO_ROOT / package, quiet=1)


class ReferenceServer(Protocol):
    def start(self) -> object: ...

    def stop(self) -> None: ...


ReferenceT = TypeVar("ReferenceT", bound=ReferenceServer)
FLUSH = "async"  # throughput rows measure the broker, not the disk: ASYNC flush, stated in the report
# A broker answers within seconds on a quiet machine; on this shared one under load 15-22 four
# sections of one run lost every row to brokers not ready after the tests' 30 s (one took 88 s to
# listen), so the run waits longer before it gives a section up.
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Scale:
    """Sizes of one run. Full sizes follow issue 8; quick sizes only check that it all runs."""

    repeats: int
    produce_messages: int      # per produce run
    pull_messages: int         # pre-filled into one queue for the pull rows
    latency_samples: int       # per latency run
    e2e_messages: int          # row 5: pre-produced into 8 queues
    scaling_messages: int      # row 6: per end-to-end scaling point
    scaling_repeats: int       # row 6: six query pairs per repeat, so fewer repeats
    big_range_bytes: int       # row 6 memory and row 7 recovery: bytes of 1 KiB messages

    @classmethod
    def full(cls) -> Scale:
        # issue 41 (fourth stop): sections 16 and 17 joined the run, so the latency rows take 200
        # samples per run (p99 is the second largest; was 300) and the scaling curve's points
        # 200,000 rows (was 400,000; start-up weighs more, the curve is not a gate)
        return cls(repeats=3, produce_messages=100_000, pull_messages=200_000, latency_samples=200,
                   e2e_messages=2_000_000, scaling_messages=200_000, scaling_repeats=2,
                   big_range_bytes=1 << 30)

    @classmethod
    def quick(cls) -> Scale:
        return cls(repeats=2, produce_messages=10_000, pull_messages=20_000, latency_samples=40,
                   e2e_messages=80_000, scaling_messages=20_000, scaling_repeats=1,
                   big_range_bytes=32 << 20)


class Environment:
    """One benchmark run's scratch directory (removed by close()) and shared processes."""

    def __init__(self, scale: Scale) -> None:
        self.scale = scale
        self.work_dir = Path(tempfile.mkdtemp(prefix="rmq-bench-"))
        self._spark = None
        self.spark_warm = False   # set once a warm-up query has run in the Spark session
        self._missing: dict[str, str] = {}   # reference server -> why it is skipped

    def directory(self, name: str) -> Path:
        path = self.work_dir / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    @contextmanager
    def broker(self, name: str = "broker-a", namesrv: str | None = None) -> Iterator[processes.ServerProcess]:
        """A broker process (ASYNC flush, loopback) on a fresh store, stopped on exit."""
        server = processes.broker(self.directory(name), name=name, namesrv_address=namesrv, flush=FLUSH)
        server.ready_timeout = READY_TIMEOUT_S
        with _running(server):
            yield server

    @contextmanager
    def namesrv(self) -> Iterator[processes.ServerProcess]:
        namesrv = processes.namesrv(self.directory("namesrv"))
        namesrv.ready_timeout = READY_TIMEOUT_S
        with _running(namesrv) as server:
            yield server

    @contextmanager
    def redis(self) -> Iterator[RedisServer | None]:
        """redis-server on loopback, or None (said once) when it cannot be installed/started:
        the rows then carry no reference."""
        with self._reference("redis", "Redis reference", RedisServer, RedisUnavailable) as server:
            yield server

    @contextmanager
    def nats(self) -> Iterator[NatsServer | None]:
        """nats-server with JetStream on file storage, or None (said once) when it cannot be
        installed or started: the rows then carry no reference."""
        with self._reference("nats", "NATS JetStream reference", NatsServer, NatsUnavailable) as server:
            yield server

    @contextmanager
    def _reference(self, key: str, label: str, make: Callable[[Path], ReferenceT],
                   unavailable: type[Exception]) -> Iterator[ReferenceT | None]:
        """A reference server started in its own directory, or None once it could not be."""
        if self._missing.get(key):
            yield None
            return
        server = make(self.directory(key))
        try:
            server.start()
        except unavailable as error:
            self._missing[key] = f"{label} skipped: {error}"
            print(self._missing[key], flush=True)
            server.stop()
            yield None
            return
        try:
            yield server
        finally:
            server.stop()

    @property
    def redis_missing(self) -> str:
        """Why the Redis reference is skipped, once that is known ("" until then)."""
        return self._missing.get("redis", "")

    @property
    def nats_missing(self) -> str:
        return self._missing.get("nats", "")

    def spark(self):
        """One local Spark session for the whole run (start-up costs seconds), with the rmq
        source and the reference source registered."""
        if self._spark is None:
            os.environ["PYSPARK_PYTHON"] = sys.executable
            os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
            # Python workers unpickle the reference source by module name: make `bench` importable.
            paths = [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
            _compile_spark_side_sources()
            from pyspark.sql import SparkSession

            from bench.flight_floor import FlightFloorDataSource
            from bench.reference_source import ReferenceDataSource
            from rmq.connector import register

            self._spark = (
                SparkSession.builder.master("local[2]")
                .appName("rmq-bench")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.ui.showConsoleProgress", "false")
                .getOrCreate()
            )
            self._spark.sparkContext.setLogLevel("ERROR")
            register(self._spark)
            self._spark.dataSource.register(ReferenceDataSource)
            self._spark.dataSource.register(FlightFloorDataSource)
        return self._spark

    def close(self) -> None:
        if self._spark is not None:
            self._spark.stop()
            self._spark = None
        self.spark_warm = False   # set once a warm-up query has run in the Spark session
        self._missing.clear()
        shutil.rmtree(self.work_dir, ignore_errors=True)


@contextmanager
def _running(server: processes.ServerProcess) -> Iterator[processes.ServerProcess]:
    try:
        try:
            server.start()
        except (RuntimeError, TimeoutError) as error:
            tail = "\n".join(server.log().splitlines()[-5:])
            raise RuntimeError(f"{error}; its log ends:\n{tail}") from error
        yield server
    finally:
        server.stop()
        server.kill()
