"""The generated stubs must match proto/rmq/v1/rmq.proto and proto/rmq/rocketmq_v2/*.proto
(regenerate with `make proto`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ["rmq_pb2.py", "rmq_pb2.pyi", "rmq_pb2_grpc.py", "rmq_pb2_grpc.pyi"]
# mypy-protobuf's protoc plugin, installed beside the interpreter (the [test] extra)
MYPY_GRPC = Path(sys.executable).parent / "protoc-gen-mypy_grpc"


def test_stubs_are_fresh(tmp_path: Path) -> None:
    protoc = pytest.importorskip("grpc_tools.protoc")
    proto_root = ROOT / "proto"
    rc = protoc.main([
        "grpc_tools.protoc", f"-I{proto_root}", f"--python_out={tmp_path}", f"--pyi_out={tmp_path}",
        f"--grpc_python_out={tmp_path}", f"--plugin=protoc-gen-mypy_grpc={MYPY_GRPC}",
        f"--mypy_grpc_out=generate_concrete_servicer_stubs:{tmp_path}",
        str(proto_root / "rmq" / "v1" / "rmq.proto"),
    ])
    assert rc == 0
    for name in GENERATED:
        fresh = (tmp_path / "rmq" / "v1" / name).read_text()
        committed = (proto_root / "rmq" / "v1" / name).read_text()
        assert fresh == committed, f"proto/rmq/v1/{name} is stale: run `make proto`"


def test_rocketmq_v2_stubs_are_fresh(tmp_path: Path) -> None:
    """RocketMQ 5's messages and their .pyi (its service has no generated servicer: the broker's
    rocketmq_v2 adapter builds the handlers from the service descriptor)."""
    protoc = pytest.importorskip("grpc_tools.protoc")
    proto_root = ROOT / "proto"
    sources = [proto_root / "rmq" / "rocketmq_v2" / f"{name}.proto" for name in ("definition", "service")]
    well_known = Path(protoc.__file__).parent / "_proto"   # google/protobuf/*.proto, as `python -m` adds
    rc = protoc.main(["grpc_tools.protoc", f"-I{proto_root}", f"-I{well_known}", f"--python_out={tmp_path}",
                      f"--pyi_out={tmp_path}", *map(str, sources)])
    assert rc == 0
    for source in sources:
        for suffix in ("_pb2.py", "_pb2.pyi"):
            name = source.stem + suffix
            fresh = (tmp_path / "rmq" / "rocketmq_v2" / name).read_text()
            committed = (proto_root / "rmq" / "rocketmq_v2" / name).read_text()
            assert fresh == committed, f"proto/rmq/rocketmq_v2/{name} is stale: run `make proto`"


def test_stubs_import_under_distinctive_name() -> None:
    from rmq.v1 import rmq_pb2, rmq_pb2_grpc

    assert rmq_pb2.DESCRIPTOR.package == "rmq.v1"
    assert hasattr(rmq_pb2_grpc, "MessagingServiceStub")
    assert "proto" not in sys.modules or not hasattr(sys.modules["proto"], "rmq_pb2")
