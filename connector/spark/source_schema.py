"""Row schema of the `rmq` source (docs/manual/spark.md), as Spark and as Arrow.

Spark accepts `pyarrow.RecordBatch`es from `read()` only when their schema equals
`to_arrow_schema(SOURCE_SCHEMA, timezone="UTC")` exactly (field nullability included)."""

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
