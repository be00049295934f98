"""Clients of the rmq broker: the gRPC client (importable without pyspark) and the Spark
data source `rmq` (stream/batch reader and writer), loaded lazily so executors and the CLI
never pull in Spark unless they use it."""

from __future__ import annotations

from typing import Any

__all__ = ["RmqDataSource", "register"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rmq.connector.spark import data_source

        return getattr(data_source, name)
    raise AttributeError(f"module 'rmq.connector' has no attribute {name!r}")
