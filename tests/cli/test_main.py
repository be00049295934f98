"""`rmq --version` names the installed distribution's version, as `pip show rmq` does; `rmq` without
the `broker` extra."""

import subprocess
import sys
from importlib.metadata import version

import pytest

from rmq.cli.main import main


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"rmq {version('rmq')}"


# `rmq` as installed without the `broker` extra: importing yaml, numpy, pyarrow or
# prometheus_client fails as if they were not installed.
WITHOUT_BROKER_EXTRA = """
import importlib.abc, sys

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("yaml", "numpy", "pyarrow", "prometheus_client"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from rmq.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_client_commands_run_without_the_broker_extra_and_server_commands_say_what_to_install() -> None:
    def rmq(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", WITHOUT_BROKER_EXTRA, *argv], capture_output=True,
                              text=True)

    listing = rmq("topic", "list", "--help")
    assert listing.returncode == 0 and "usage: rmq topic list" in listing.stdout, listing.stderr
    broker = rmq("broker", "--listen", "127.0.0.1:1")
    assert broker.returncode == 2
    assert broker.stderr.strip() == "rmq: error: rmq broker needs yaml: pip install 'rmq[broker]'"
