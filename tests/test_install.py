"""One import name: a wheel built from the checkout and installed into a fresh venv outside
it, and the editable install `make test` uses, both expose `rmq`, `rmq.v1`, `rmq.store`,
`rmq.broker_server`, `rmq.connector`, `rmq.cli` (and `py.typed`), and none of the old
top-level names `store`, `connector`, `broker_server`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
NEW_NAMES = ("rmq", "rmq.v1", "rmq.store", "rmq.broker_server", "rmq.connector", "rmq.cli")
OLD_NAMES = ("store", "connector", "broker_server")

# Run by the interpreter under test from a directory outside the checkout: where each name
# comes from (or the error importing it), and whether rmq ships py.typed.
PROBE = f"""
import importlib, json, pathlib
found = {{}}
for name in {NEW_NAMES + OLD_NAMES!r}:
    try:
        found[name] = importlib.import_module(name).__file__
    except ImportError as error:
        found[name] = "ImportError: " + str(error)
import rmq
found["py.typed"] = (pathlib.Path(rmq.__file__).parent / "py.typed").is_file()
print(json.dumps(found))
"""


def probe(python: Path | str, cwd: Path, env: dict[str, str] | None = None) -> dict[str, object]:
    result = subprocess.run([str(python), "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=60, check=True)
    return json.loads(result.stdout)


def assert_one_import_name(found: dict[str, object], installed_under: Path) -> None:
    for name in NEW_NAMES:
        assert str(found[name]).startswith(str(installed_under)), (name, found[name])
    for name in OLD_NAMES:
        assert str(found[name]).startswith(f"ImportError: No module named '{name}'"), (name, found[name])
    assert found["py.typed"] is True


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv (outside the checkout) with only the rmq wheel installed in it."""
    base = tmp_path_factory.mktemp("install")
    # setuptools builds in the source tree (build/): build from a copy, the checkout stays clean
    source = shutil.copytree(REPO_ROOT, base / "source", ignore=shutil.ignore_patterns(
        ".*", "build", "*.egg-info", "__pycache__", "spark-warehouse", "metastore_db"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "--wheel-dir", str(base / "dist"), str(source)], check=True, timeout=120,
                   cwd=base, capture_output=True)
    (wheel,) = (base / "dist").glob("rmq-*.whl")
    venv.create(base / "venv", with_pip=False)
    python = base / "venv" / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet",
                    str(wheel)], check=True, timeout=120, cwd=base, capture_output=True)
    return base / "venv"


def dependencies_only_env(python: Path) -> dict[str, str]:
    """The checkout's venv site-packages for grpc, numpy, ... A PYTHONPATH entry does not run
    .pth files, so the editable install's `rmq` finder stays out."""
    site_packages = sysconfig.get_paths()["purelib"]
    return {"PYTHONPATH": site_packages, "PATH": str(python.parent), "HOME": str(python.parent)}


def test_the_wheel_installs_one_import_name(wheel_venv: Path, tmp_path: Path) -> None:
    python = wheel_venv / "bin" / "python"
    found = probe(python, tmp_path, dependencies_only_env(python))
    assert_one_import_name(found, wheel_venv)


# Where each folder of the checkout is installed (pyproject.toml package-dir).
INSTALLED_AS = {"proto/rmq": "rmq", "store": "rmq/store", "broker_server": "rmq/broker_server",
                "connector": "rmq/connector", "cli": "rmq/cli"}


def test_the_wheel_holds_every_module_of_the_checkout(wheel_venv: Path) -> None:
    (site_packages,) = (wheel_venv / "lib").glob("python3*/site-packages")
    expected = {f"{target}/{path.relative_to(REPO_ROOT / folder)}"
                for folder, target in INSTALLED_AS.items() for path in (REPO_ROOT / folder).rglob("*.py")
                if "__pycache__" not in path.parts}
    installed = {str(path.relative_to(site_packages)) for path in (site_packages / "rmq").rglob("*.py")}
    assert sorted(expected - installed) == []


def test_the_wheel_installs_the_rmq_command(wheel_venv: Path, tmp_path: Path) -> None:
    python = wheel_venv / "bin" / "python"
    env = dependencies_only_env(python)
    for command in ([str(wheel_venv / "bin" / "rmq"), "--help"], [str(python), "-m", "rmq.cli", "--help"]):
        result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stderr
        assert "namesrv" in result.stdout and "produce" in result.stdout


def test_the_editable_install_has_the_same_names(tmp_path: Path) -> None:
    found = probe(sys.executable, tmp_path)
    assert_one_import_name(found, REPO_ROOT)
