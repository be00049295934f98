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
