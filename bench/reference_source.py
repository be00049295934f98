"""The end-to-end reference (row 5): a Python streaming data source that yields zero-copy
Arrow batches of rows identical to rmq's. The benchmark writes one batch decoded from the
broker to an Arrow IPC file; every partition memory-maps it and yields it over and over, so
what is measured is Spark's cost of taking Arrow batches from a Python source."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

NAME = "rmq_reference"


def write_template(batch: pa.RecordBatch, path: Path) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch)


def options(template: Path, rows: int, partitions: int, schema: StructType) -> dict[str, str]:
    """The reader options for `rows` rows over `partitions` partitions."""
    return {"template": str(template), "rows": str(rows), "partitions": str(partitions),
            "schema": schema.json()}


@dataclass(frozen=True)
class RowRange(InputPartition):
    start: int
    end: int


class FixedRowsDataSource(DataSource):
    """A benchmark source of a fixed number of rows, its schema given (JSON) in option "schema"."""

    def schema(self) -> StructType:
        return StructType.fromJson(json.loads(self.options["schema"]))


class FixedRowsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are row counts; all `rows` exist from the start, so AvailableNow reads them all."""

    def __init__(self, rows: int, partitions: int) -> None:
        self.rows, self.partition_count = rows, partitions

    def initialOffset(self) -> dict:
        return {"row": 0}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return {"row": self.rows}

    def prepareForTriggerAvailableNow(self) -> None:
        """The data is fixed: the target offset is `rows`."""

    def commit(self, end: dict) -> None:
        """Nothing to acknowledge."""


class ReferenceDataSource(FixedRowsDataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def streamReader(self, schema: StructType) -> ReferenceStreamReader:
        return ReferenceStreamReader(
            Path(self.options["template"]), int(self.options["rows"]), int(self.options["partitions"])
        )


class ReferenceStreamReader(FixedRowsStreamReader):
    """Each partition yields the template batch over its share of the rows."""

    def __init__(self, template: Path, rows: int, partitions: int) -> None:
        super().__init__(rows, partitions)
        self.template = template

    def partitions(self, start: dict, end: dict) -> list[RowRange]:
        first, last = start["row"], end["row"]
        step = -(-(last - first) // self.partition_count)
        return [RowRange(lo, min(lo + step, last)) for lo in range(first, last, step)] if last > first else []

    def read(self, partition: RowRange) -> Iterator[pa.RecordBatch]:
        with pa.memory_map(str(self.template)) as source:
            yield from repeated(pa.ipc.open_file(source).get_batch(0), partition.end - partition.start)


def repeated(batch: pa.RecordBatch, count: int) -> Iterator[pa.RecordBatch]:
    """`count` rows: `batch` over and over, the last one cut short (zero-copy slices)."""
    while count > 0:
        yield batch if count >= batch.num_rows else batch.slice(0, count)
        count -= batch.num_rows
