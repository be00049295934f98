"""`rmq --version` names the installed distribution's version, as `pip show rmq` does."""

from importlib.metadata import version

import pytest

from rmq.cli.main import main


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"rmq {version('rmq')}"
