"""Dependencies point one way (ARCHITECTURE.md): each product
folder imports only the rmq packages below it, pyspark only in rmq.connector.spark, and no
product code imports the tests."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
OUR_TOP_LEVEL = ("rmq", "tests", "integration_tests", "store", "connector", "broker_server", "cli", "bench")

# folder -> the rmq packages it may import (rmq itself: its own modules, never the folders below)
ALLOWED = {
    "proto/rmq": ("rmq",),
    "store": ("rmq", "rmq.store"),
    "broker_server": ("rmq", "rmq.store", "rmq.broker_server"),
    "connector": ("rmq", "rmq.connector"),
    "cli": ("rmq", "rmq.connector", "rmq.broker_server", "rmq.cli"),
}
SUBPACKAGES = ("rmq.store", "rmq.broker_server", "rmq.connector", "rmq.cli")


def imported_modules(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{alias.name}" for alias in node.names if node.module == "rmq"]
    return names


def package_of(name: str) -> str:
    """The rmq package a module name belongs to (rmq.connector.spark.x -> rmq.connector)."""
    return next((p for p in SUBPACKAGES if name == p or name.startswith(p + ".")), "rmq")


def violations(folder: str) -> list[str]:
    found = []
    for path in sorted((REPO_ROOT / folder).rglob("*.py")):
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        spark = path.is_relative_to(REPO_ROOT / "connector" / "spark")
        for name in imported_modules(path):
            top = name.split(".")[0]
            where = f"{path.relative_to(REPO_ROOT)}: {name}"
            if top == "pyspark" and not spark:
                found.append(where)
            elif top == "rmq" and package_of(name) not in ALLOWED[folder]:
                found.append(where)
            elif top in OUR_TOP_LEVEL and top != "rmq":
                found.append(where)
    return found


@pytest.mark.parametrize("folder", list(ALLOWED))
def test_imports_point_one_way(folder: str) -> None:
    assert violations(folder) == []


def test_the_check_sees_a_wrong_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from rmq.connector.client import RmqClient\nimport integration_tests\n")
    assert imported_modules(module) == ["rmq.connector.client", "integration_tests"]
    assert package_of("rmq.connector.spark.options") == "rmq.connector"


@pytest.mark.parametrize("folder", ["bench", "examples"])
def test_bench_and_examples_do_not_import_the_tests(folder: str) -> None:
    imports = [f"{path.relative_to(REPO_ROOT)}: {name}" for path in sorted((REPO_ROOT / folder).rglob("*.py"))
               for name in imported_modules(path) if name.split(".")[0] in ("tests", "integration_tests")]
    assert imports == []


# The broker's own layers (issue 42): protocol adapters -> processors -> managers / store, nothing
# back up. An adapter only translates its protocol into the processors (processors/pipeline.py);
# the processors and everything below them never import an adapter, and the managers never import a
# processor. The wiring (BrokerController, the name server, controller mode) may import anything.
BROKER = REPO_ROOT / "broker_server"
ADAPTERS = ("remoting", "rmq_v1", "rocketmq_v2")
PROCESSOR_MODULES = ("pipeline", "consumer_send_msg_back")   # + *_processor
WIRING = ("broker_controller", "name_server", "replication.replicas_manager")


def broker_layer(parts: list[str]) -> str:
    """adapter:<name>, processor, wiring or manager, for a module's path parts under broker_server."""
    if parts[0] in ADAPTERS:
        return f"adapter:{parts[0]}"
    dotted = ".".join(parts)
    if parts[-1] == "__init__" or any(dotted == w or dotted.startswith(w + ".") for w in WIRING):
        return "wiring"
    if parts[0] == "processors" and len(parts) > 1 and (
            parts[1].endswith("_processor") or parts[1] in PROCESSOR_MODULES):
        return "processor"
    return "manager"


def broker_violations() -> list[str]:
    found = []
    for path in sorted(BROKER.rglob("*.py")):
        own = broker_layer(list(path.relative_to(BROKER).with_suffix("").parts))
        if own == "wiring":
            continue
        for name in imported_modules(path):
            parts = name.split(".")
            if parts[:2] != ["rmq", "broker_server"] or len(parts) < 3:
                continue
            other = broker_layer(parts[2:])
            if (other.startswith("adapter:") and other != own) or (other == "processor" and own == "manager"):
                found.append(f"{path.relative_to(REPO_ROOT)}: {name}")
    return found


def test_broker_layers_point_one_way() -> None:
    assert broker_violations() == []


def test_the_broker_check_sees_an_import_up() -> None:
    assert broker_layer(["processors", "pull_message_processor"]) == "processor"
    assert broker_layer(["processors", "topic_config_manager"]) == "manager"
    assert broker_layer(["offsets", "consumer_manager"]) == "manager"
    assert broker_layer(["rmq_v1", "messaging_service"]) == "adapter:rmq_v1"


# Every request kind enters a processor (issue 42, ARCHITECTURE.md "Requests"): a protocol adapter
# reaches the store and the consumers' state (offsets, held pulls, pop state, locks, the store's
# executor) only through processors/pipeline.py's processors. The remoting port's connection events
# (ConsumerManager), the RocketMQ 5 timer park (TimerMessageStore) and rmq.v1
# WatchConsumerIds are the adapters' own still (ARCHITECTURE.md). The gRPC adapters look topics and
# routes up only through TopicRouteProcessor (the remoting adapter's prepared send still reads
# TopicConfigManager).
STATE_ONLY_PROCESSORS_REACH = {
    "rmq.store": {"MessageStore"},
    "rmq.broker_server.offsets.consumer_offset_manager": None,
    "rmq.broker_server.offsets.rebalance_lock_manager": None,
    "rmq.broker_server.long_polling.pull_request_hold_service": None,
    "rmq.broker_server.processors.store_executor": None,
    "rmq.broker_server.processors.pop_state": None,
}


TOPICS_ONLY_THE_ROUTE_PROCESSOR_READS = {"rmq.broker_server.processors.topic_config_manager": None}


def adapter_state_imports(root: Path = BROKER, adapters: tuple[str, ...] = ADAPTERS,
                          reach: dict[str, set[str] | None] = STATE_ONLY_PROCESSORS_REACH) -> list[str]:
    found = []
    for adapter in adapters:
        for path in sorted((root / adapter).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom) or node.module not in reach:
                    continue
                names = reach[node.module]
                found += [f"{path.relative_to(root)}: {node.module}.{alias.name}" for alias in node.names
                          if names is None or alias.name in names]
    return found


def test_adapters_reach_the_store_and_consumer_state_only_through_processors() -> None:
    assert adapter_state_imports() == []


def test_grpc_adapters_read_topics_only_through_the_route_processor() -> None:
    assert adapter_state_imports(adapters=("rmq_v1", "rocketmq_v2"),
                                 reach=TOPICS_ONLY_THE_ROUTE_PROCESSOR_READS) == []


def test_the_adapter_check_sees_a_store_import(tmp_path: Path) -> None:
    (tmp_path / "remoting").mkdir()
    (tmp_path / "remoting" / "m.py").write_text("from rmq.store import MessageStore, MessageToStore\n")
    assert adapter_state_imports(tmp_path) == ["remoting/m.py: rmq.store.MessageStore"]
