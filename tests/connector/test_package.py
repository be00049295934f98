"""`rmq.connector` as users import it: every public name is there (and typed), and the SDK runs
without pyarrow, numpy or pyspark installed (they come with the `spark` and `broker` extras)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import rmq.connector
from rmq.connector import ConfigError, RmqError, RmqRefused, StateError

# Run in a fresh interpreter where importing pyarrow, numpy or pyspark fails as if they were not
# installed; it uses the SDK's public names without a broker (nothing listens on port 1).
WITHOUT_ARROW = textwrap.dedent("""
    import importlib.abc, sys

    class NotInstalled(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("pyarrow", "numpy", "pyspark"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    import rmq.connector
    from rmq.connector import *   # noqa: F403
    names = {name: getattr(rmq.connector, name) for name in rmq.connector.__all__}
    producer = Producer("127.0.0.1:1")
    push = PushConsumer("orders", "127.0.0.1:1", message_model=MessageModel.BROADCASTING)
    push.subscribe("Orders", MessageSelector.by_tag("TagA"))
    pull = PullConsumer("reports", "127.0.0.1:1", consume_from="first")
    pull.subscribe("Orders")
    pull.shutdown()
    push.shutdown()
    try:
        rmq.connector.register
    except ModuleNotFoundError as error:
        print("spark:", error.name)
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("pyarrow", "numpy", "pyspark"))
    print("loaded:", loaded)
""")


def test_the_sdk_imports_and_runs_without_pyarrow_numpy_or_pyspark() -> None:
    result = subprocess.run([sys.executable, "-c", WITHOUT_ARROW], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "loaded: []" in result.stdout
    assert "spark: pyspark" in result.stdout or "spark: pyarrow" in result.stdout   # Spark stays optional


def test_every_exported_name_is_importable_and_the_spark_source_loads_on_use() -> None:
    assert all(hasattr(rmq.connector, name) for name in rmq.connector.__all__)
    assert "register" not in rmq.connector.__all__   # `import *` does not pull in Spark
    assert rmq.connector.register.__module__ == "rmq.connector.spark.data_source"


def test_client_errors_are_one_tree_and_still_the_builtins_callers_catch() -> None:
    assert issubclass(ConfigError, RmqError) and issubclass(ConfigError, ValueError)
    assert issubclass(StateError, RmqError) and issubclass(StateError, RuntimeError)
    assert issubclass(RmqRefused, RmqError)


def test_spark_s_per_query_runner_imports_neither_the_sdk_s_clients_nor_the_remoting_client() -> None:
    """Spark starts a fresh Python process per streaming query that imports the data source and
    plans micro-batches (routes, offsets, heartbeats over gRPC): it loads no producer, consumer or
    4.x remoting client (bench/NOTES.md "Spark ingest, fourth pass": ~0.1 s of CPU per query)."""
    pytest.importorskip("pyspark")
    unused = ("rmq.connector.producer", "rmq.connector.push_consumer", "rmq.connector.pull_consumer",
              "rmq.connector.remoting_client", "rmq.connector.consume_message_concurrently_service",
              # the push consumer's rebalancing, its process queues and its configuration (stop 6)
              "rmq.connector.rebalance_impl", "rmq.connector.process_queue", "rmq.connector.message",
              "rmq.connector.consumer_config", "rmq.connector.subscription")
    probe = ("import sys, rmq.connector.spark.data_source\n"
             f"print(sorted(set({unused!r}) & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
