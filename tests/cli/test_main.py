"""`rmq --version` names the one version (rmq.__version__, which pyproject.toml reads), newer than
every release CHANGELOG.md lists; `rmq` without the `broker` extra."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from rmq import __version__
from rmq.cli.main import main

ROOT = Path(__file__).parents[2]


def test_version_prints_the_one_version_newer_than_every_release(capsys: pytest.CaptureFixture[str]) -> None:
    """#46 defect 8: `rmq --version` said 0.1.0 while CHANGELOG.md listed 0.2.0 as released."""
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"rmq {__version__}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    released = re.findall(r"^## \[(\d+)\.(\d+)\.(\d+)\]", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert released, "CHANGELOG.md lists no release"
    current = tuple(int(part) for part in re.findall(r"\d+", __version__)[:3])
    assert all(current > tuple(map(int, release)) for release in released), (current, released)


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


# Parses `rmq WORDS` as main() does (its --help exits) and lists which of these modules it imported.
IMPORTS_OF_A_COMMAND = """
import sys
from rmq.cli.main import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(" ".join(m for m in ("rmq.connector", "rmq.cli.console_command", "rmq.store", "numpy", "pyarrow")
               if m in sys.modules))
"""


@pytest.mark.parametrize(("words", "imported"), [
    (["broker", "--help"], ""),
    (["namesrv", "--help"], ""),
    (["topic", "list", "--help"], "rmq.connector rmq.cli.console_command"),
])
def test_a_server_command_skips_the_client_sdk_and_a_client_command_the_store(
        words: list[str], imported: str) -> None:
    """Every broker and name server start (hundreds in `make test`) and every client command pays
    only its own imports: ~0.2 s of CPU less each (the CLI imported all of them for any command)."""
    done = subprocess.run([sys.executable, "-c", IMPORTS_OF_A_COMMAND, *words], capture_output=True,
                          text=True, check=True)
    assert done.stdout.split("\n")[-2] == imported, done.stdout[-300:]
