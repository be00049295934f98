"""The reliability scenarios' `report` fixture. The figures are printed at the end of the run, and
RELIABILITY.md written when RMQ_RELIABILITY_REPORT=1 (`make reliability`), by the hooks in
integration_tests/conftest.py (the one conftest a pytest-xdist controller loads); a worker hands its
figures to the controller here."""

from __future__ import annotations

import pytest

from integration_tests.reliability.report import REPORT, ReliabilityReport


@pytest.fixture
def report() -> ReliabilityReport:
    return REPORT


def pytest_sessionfinish(session: pytest.Session) -> None:
    worker_output = getattr(session.config, "workeroutput", None)   # set in a pytest-xdist worker only
    if worker_output is not None:
        worker_output["reliability"] = REPORT.as_data()
