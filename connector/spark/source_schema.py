"""Row schema of the `rmq` source (docs/manual/spark.md), as Spark and as Arrow, and the columns a
query names (`spark.readStream.format("rmq").schema("queue_id int, queue_offset long, body binary")`):
any of the source's columns, each once, with the source's type, in any order.

Spark accepts `pyarrow.RecordBatch`es from `read()` only when their schema equals
`to_arrow_schema(schema, timezone="UTC")` exactly (field nullability included): every column of the
source is nullable, so a query's schema must declare them so."""

from __future__ import annotations

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from rmq.connector.errors import RmqOptionError

SOURCE_SCHEMA = StructType([
    StructField("topic", StringType()),
    StructField("broker_name", StringType()),
    StructField("queue_id", IntegerType()),
    StructField("queue_offset", LongType()),
    StructField("msg_id", StringType()),
    StructField("tags", StringType()),
    StructField("keys", StringType()),
    StructField("body", BinaryType()),
    StructField("properties", MapType(StringType(), StringType())),
    StructField("born_timestamp", TimestampType()),
    StructField("store_timestamp", TimestampType()),
])

SOURCE_ARROW_SCHEMA = to_arrow_schema(SOURCE_SCHEMA, timezone="UTC")
ALL_COLUMNS = tuple(SOURCE_SCHEMA.names)
_SOURCE_FIELDS = {field.name: field for field in SOURCE_SCHEMA.fields}
_VALID = ", ".join(f"{field.name} {field.dataType.simpleString()}" for field in SOURCE_SCHEMA.fields)


def source_columns(schema: StructType) -> tuple[str, ...]:
    """The source columns a query's schema names, in its order; RmqOptionError naming the column
    (and listing the valid ones) for an unknown name, a name given twice, another type (a nested
    one included) or a NOT NULL column."""
    names: list[str] = []
    for field in schema.fields:
        source = _SOURCE_FIELDS.get(field.name)
        if source is None:
            raise _refused(field.name, "is not a column of the rmq source")
        if field.name in names:
            raise _refused(field.name, "is named twice")
        if field.dataType != source.dataType:
            raise _refused(field.name, f"is {source.dataType.simpleString()} in the rmq source, not "
                                       f"{field.dataType.simpleString()}")
        if not field.nullable:
            raise _refused(field.name, "is declared NOT NULL, but the rmq source's columns are nullable")
        names.append(field.name)
    if not names:
        raise RmqOptionError(f"The schema names no column: the rmq source's columns are {_VALID}")
    return tuple(names)


def _refused(column: str, problem: str) -> RmqOptionError:
    return RmqOptionError(f"Column {column!r} of the schema {problem}: the rmq source's columns are {_VALID} "
                          "(any of them, each once, in any order)")
