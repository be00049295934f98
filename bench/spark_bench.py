"""Row 5 and the end-to-end scaling rows of row 6: a Spark streaming query over
format("rmq") with Trigger.AvailableNow and a noop sink, rows/s including query start-up,
against the reference source yielding zero-copy Arrow batches of identical rows."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from pyspark.sql.types import StructType

from bench import flight_floor, machine, reference_source
from bench.environment import Environment
from bench.harness import Row, Stats, Target, measure_pair
from bench.workload import GROUP, body_of, produce
from rmq.connector.client import RmqClient
from rmq.connector.spark.message_decoder import decode
from rmq.connector.spark.options import DEFAULT_PULL_BATCH_SIZE
from rmq.connector.spark.source_schema import SOURCE_ARROW_SCHEMA, SOURCE_SCHEMA

E2E_QUEUES = 8
SCALING_QUEUES = (1, 2, 4, 8, 16)
FILL_BATCH = 1024
WARM_UP_ROWS = 200_000
ROUTE_WAIT_S = 30.0
E2E_TARGET = Target(min_ratio=0.9)   # BENCHMARKS.md "Targets", issue 28
NARROW_COLUMNS = ("queue_id", "queue_offset", "body")   # the three-column schema of row 5


@dataclass(frozen=True)
class Ingest:
    """One topic filled with `rows` messages, and the reference with as many partitions."""

    endpoints: str
    topic: str
    rows: int
    partitions: int


def e2e_rows(env: Environment) -> list[Row]:
    """A streaming query `spark.readStream.format("rmq")` with Trigger.AvailableNow into the
    `noop` sink reads a topic of 8 queues pre-filled with 100-byte messages (connector defaults:
    pullBatchSize 4096); rows/s from `start()` to termination, so query start-up counts. The
    query runs with the default schema (11 columns) and with a schema naming 3 (queue_id,
    queue_offset, body: the broker and the executor build only those, issue 43), each with option
    transport=flight (the broker's Arrow Flight data plane, docs/data-plane.md) and transport=grpc
    (PullMessage), alternating.
    Reference, per schema: the same query over `bench/reference_source.py`, a Python streaming
    source whose 8 partitions yield one memory-mapped Arrow batch of that schema's columns, decoded
    from this topic's first pull, over and over (zero-copy, identical rows). Spark `local[2]`, one
    warm-up query of each source before measuring. CPU per row: the broker process's, and the
    Spark JVM's with its Python workers (/proc, the whole process tree), per query.
    Floors with rmq removed (`bench/flight_floor.py`): the same query over a bare pyarrow Flight
    server in its own process, streaming the reference's batches (prebuilt: the transport's floor)
    and gathering them per batch out of CommitLog-shaped records in a memory map, laid out as the
    broker stores this row's (the queues taking turns record by record; numpy: the least a store
    keeping whole records does, without checks); its server's CPU per row as the broker's."""
    with env.broker() as broker, ExitStack() as floors:
        _warm_up(env, broker.address)
        ingest = _fill(broker.address, "bench-e2e", E2E_QUEUES, env.scale.e2e_messages)
        name = f"Spark ingest, {E2E_QUEUES} queues, {ingest.rows:,} msgs"
        sources: dict[tuple[str, str], _Source] = {}
        for key, columns in SCHEMAS.items():
            path, schema = _template(env, ingest, columns)
            for transport in TRANSPORTS:
                sources[key, transport] = _Source("rmq", partial(_rmq_options, ingest, transport),
                                                  broker.process.pid, _schema(columns))
            reference = reference_source.options(path, ingest.rows, ingest.partitions, schema)
            sources[key, REFERENCE] = _Source(reference_source.NAME, partial(dict, reference),
                                              broker.process.pid)
            for mode in FLOORS:
                floor = floors.enter_context(flight_floor.running(mode, path, ingest.rows, ingest.partitions))
                floor_options = flight_floor.options(floor.location, ingest.rows, ingest.partitions, schema)
                sources[key, mode] = _Source(flight_floor.NAME, partial(dict, floor_options), floor.pid)
        runs = {pair: _Runs() for pair in sources}
        jvm = _jvm_pid(env)
        for _ in range(env.scale.repeats):   # schemas, transports, references and floors alternate
            for pair, source in sources.items():
                runs[pair].measure(env, source.pid, jvm, source.name, source.options(), ingest.rows,
                                   source.schema)
        return [row for key in SCHEMAS for row in _e2e_schema_rows(name, key, ingest, runs)]


@dataclass(frozen=True)
class _Source:
    """A source row 5 reads: its Spark name, its options for one query (rmq's: a fresh consumer
    group each), the process serving it and the query's schema."""

    name: str
    options: Callable[[], dict[str, str]]
    pid: int
    schema: StructType | None = None


def _e2e_schema_rows(name: str, key: str, ingest: Ingest, runs: dict[tuple[str, str], _Runs]) -> list[Row]:
    """Row 5 for one schema: ingest rates of both transports against the reference of the same
    columns, then CPU per row of the broker and of Spark."""
    reference = runs[key, REFERENCE]
    label = f"zero-copy Arrow source, {ingest.partitions} partitions, {key}"
    rows = [Row(f"{name}, {key}, {TRANSPORT_NAMES[t]}", "rows/s", Stats.of(runs[key, t].rates), label,
                Stats.of(reference.rates), E2E_TARGET) for t in TRANSPORTS]
    for t in TRANSPORTS:
        broker_target = BROKER_CPU_TARGET if (key, t) == (NARROW_KEY, "flight") else None
        rows += [Row(f"broker CPU per row, {key}, {TRANSPORT_NAMES[t]}", "µs",
                     Stats.of(runs[key, t].broker_us), target=broker_target),
                 Row(f"Spark (JVM + Python workers) CPU per row, {key}, {TRANSPORT_NAMES[t]}", "µs",
                     Stats.of(runs[key, t].executor_us), f"zero-copy Arrow source, {key}",
                     Stats.of(reference.executor_us))]
    for mode in FLOORS:
        if (key, mode) in runs:
            floor = runs[key, mode]
            described = f"{key}, {FLOOR_NAMES[mode]}"
            rows += [Row(f"{name}, {described}", "rows/s", Stats.of(floor.rates), label,
                         Stats.of(reference.rates)),
                     Row(f"floor server CPU per row, {described}", "µs", Stats.of(floor.broker_us)),
                     Row(f"Spark (JVM + Python workers) CPU per row, {described}", "µs",
                         Stats.of(floor.executor_us), f"zero-copy Arrow source, {key}",
                         Stats.of(reference.executor_us))]
    return rows


TRANSPORTS = ("flight", "grpc")
TRANSPORT_NAMES = {"flight": "transport=flight", "grpc": "transport=grpc (PullMessage)"}
REFERENCE = "reference"
PREBUILT, GATHERED = flight_floor.MODES
FLOORS = (PREBUILT, GATHERED)
FLOOR_NAMES = {PREBUILT: "bare Arrow Flight server, prebuilt batches (no rmq code)",
               GATHERED: "bare Arrow Flight server gathering from records (no rmq code)"}
NARROW_KEY = f"3 columns ({', '.join(NARROW_COLUMNS)})"
DEFAULT_KEY = "default schema (11 columns)"
SCHEMAS: dict[str, tuple[str, ...] | None] = {DEFAULT_KEY: None, NARROW_KEY: NARROW_COLUMNS}
BROKER_CPU_TARGET = Target(max_value=0.2, unit="µs")   # issue 43: broker CPU per Flight row, 3 columns


def _schema(columns: tuple[str, ...] | None) -> StructType | None:
    """The query's schema naming `columns` (None: the source's default schema)."""
    return None if columns is None else StructType([SOURCE_SCHEMA[name] for name in columns])


@dataclass
class _Runs:
    """One source's ingest rates and CPU per row over the repeats."""

    rates: list[float] = field(default_factory=list)
    broker_us: list[float] = field(default_factory=list)
    executor_us: list[float] = field(default_factory=list)

    def measure(self, env: Environment, broker_pid: int, jvm_pid: int, source: str, options: dict[str, str],
                rows: int, schema: StructType | None = None) -> None:
        broker_before, jvm_before = machine.process_cpu_seconds(broker_pid), machine.tree_cpu_seconds(jvm_pid)
        self.rates.append(_ingest_rate(env, source, options, rows, schema))
        self.broker_us.append((machine.process_cpu_seconds(broker_pid) - broker_before) / rows * 1e6)
        self.executor_us.append((machine.tree_cpu_seconds(jvm_pid) - jvm_before) / rows * 1e6)


def _jvm_pid(env: Environment) -> int:
    """The Spark session's JVM (its Python workers are its children)."""
    return int(env.spark().sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def scaling_rows(env: Environment) -> list[Row]:
    """The end-to-end query of row 5 over topics of 1, 2, 4, 8 and 16 queues on one broker,
    then over 8 queues spread on two brokers (4 each, routes from a name server; compare with
    the 8-queue row on one broker); each against the reference source with as many
    partitions. Smaller topics than row 5, so start-up weighs more."""
    count, repeats = env.scale.scaling_messages, env.scale.scaling_repeats
    rows = []
    with env.broker() as broker:
        _warm_up(env, broker.address)
        for queues in SCALING_QUEUES:
            ingest = _fill(broker.address, f"bench-scale-{queues}", queues, count)
            rows.append(_ingest_row(env, ingest, f"Spark ingest, {queues} queue(s), 1 broker", repeats))
    with ExitStack() as stack:
        namesrv = stack.enter_context(env.namesrv())
        for name in ("broker-s1", "broker-s2"):
            stack.enter_context(env.broker(name, namesrv=namesrv.address))
        ingest = _fill(namesrv.address, "bench-scale-2b", E2E_QUEUES // 2, count, brokers=2)
        rows.append(_ingest_row(env, ingest, "Spark ingest, 8 queues over 2 brokers (4 each)", repeats))
    return rows


def _fill(endpoints: str, topic: str, queues_per_broker: int, rows: int, brokers: int = 1) -> Ingest:
    """Create the topic (on every broker the endpoints know) and produce `rows` 100-byte
    messages; the broker spreads each batch over the queues round-robin."""
    with RmqClient(endpoints) as client:
        client.create_topic(topic, queues=queues_per_broker)
        _wait_for_route(client, topic, brokers)
        produce(client, topic, rows, body_of(100), FILL_BATCH)
        offsets = client.topic_offsets(topic)
    stored = sum(o.max_offset - o.min_offset for o in offsets.values())
    if stored != rows:
        raise RuntimeError(f"{topic}: {stored} messages stored, {rows} produced")
    return Ingest(endpoints, topic, rows, len(offsets))


def _wait_for_route(client: RmqClient, topic: str, brokers: int) -> None:
    """A name server learns a new topic from the brokers' registration; wait for all of them."""
    deadline = time.monotonic() + ROUTE_WAIT_S
    while len(client.query_route(topic).brokers) < brokers:
        if time.monotonic() > deadline:
            raise RuntimeError(f"route of {topic} does not list {brokers} brokers after {ROUTE_WAIT_S}s")
        time.sleep(0.2)


def _ingest_row(env: Environment, ingest: Ingest, name: str, repeats: int,
                target: Target | None = None) -> Row:
    reference_options = _reference_options(env, ingest)
    subject, reference = measure_pair(
        lambda: _ingest_rate(env, "rmq", _rmq_options(ingest), ingest.rows),
        lambda: _ingest_rate(env, reference_source.NAME, reference_options, ingest.rows),
        repeats,
    )
    return Row(f"{name}, {ingest.rows:,} msgs", "rows/s", subject,
               f"zero-copy Arrow source, {ingest.partitions} partitions", reference, target)


def _rmq_options(ingest: Ingest, transport: str = "auto") -> dict[str, str]:
    # A fresh group each run: a previous query's membership must not take queues away.
    return {"endpoints": ingest.endpoints, "topic": ingest.topic, "startingOffsets": "earliest",
            "consumerGroup": f"{GROUP}-{uuid.uuid4().hex[:8]}", "transport": transport}


def _reference_options(env: Environment, ingest: Ingest, columns: tuple[str, ...] | None = None
                       ) -> dict[str, str]:
    """The reference source's options: as many partitions as queues, each yielding `_template`."""
    path, schema = _template(env, ingest, columns)
    return reference_source.options(path, ingest.rows, ingest.partitions, schema)


def _template(env: Environment, ingest: Ingest, columns: tuple[str, ...] | None) -> tuple[Path, StructType]:
    """One pull batch of the topic's first queue, decoded and in Spark's Arrow schema (an Arrow IPC
    file): exactly the rows rmq yields (or only `columns` of them); and the schema of those columns."""
    names = columns or tuple(SOURCE_SCHEMA.names)
    path = env.directory("templates") / f"{ingest.topic}-{len(names)}.arrow"
    with RmqClient(ingest.endpoints) as client:
        mq = next(mq for mq, o in client.topic_offsets(ingest.topic).items() if o.max_offset > 0)
        result = client.pull(mq, 0, DEFAULT_PULL_BATCH_SIZE, group=GROUP)
    batch = decode(result.messages, mq.broker_name).cast(SOURCE_ARROW_SCHEMA).select(list(names))
    reference_source.write_template(batch, path)
    return path, StructType([SOURCE_SCHEMA[name] for name in names])


def _warm_up(env: Environment, endpoints: str) -> None:
    """The first queries of a JVM run several times slower: once per Spark session, run both
    sources over a small topic, unmeasured."""
    if env.spark_warm:
        return
    ingest = _fill(endpoints, "bench-warm-up", E2E_QUEUES, min(WARM_UP_ROWS, env.scale.scaling_messages))
    _ingest_rate(env, "rmq", _rmq_options(ingest), ingest.rows)
    _ingest_rate(env, reference_source.NAME, _reference_options(env, ingest), ingest.rows)
    env.spark_warm = True


def _ingest_rate(env: Environment, source: str, options: dict[str, str], expected_rows: int | None,
                 schema: StructType | None = None) -> float:
    """Rows/s of one AvailableNow query into the noop sink, from start() to termination; `schema`:
    the query's own (`.schema(...)`), else the source's."""
    spark = env.spark()
    checkpoint = env.directory("checkpoints") / uuid.uuid4().hex
    start = time.perf_counter()
    reader = spark.readStream.format(source).options(**options)
    query = (
        (reader if schema is None else reader.schema(schema)).load()
        .writeStream.format("noop").trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint)).start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - start
    rows = sum(progress["numInputRows"] for progress in query.recentProgress)
    if expected_rows is not None and rows != expected_rows:
        raise RuntimeError(f"query over {source} read {rows} rows, expected {expected_rows}")
    return rows / elapsed
