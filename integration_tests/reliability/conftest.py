"""Hooks that print the reliability figures at the end of the run and write RELIABILITY.md
when RMQ_RELIABILITY_REPORT=1 (`make reliability`); normal test runs leave the file alone."""

from __future__ import annotations

import pytest

from integration_tests.reliability.report import REPORT, ReliabilityReport


@pytest.fixture
def report() -> ReliabilityReport:
    return REPORT


def pytest_terminal_summary(terminalreporter) -> None:
    if REPORT.scenarios:
        terminalreporter.section("reliability figures")
        for line in REPORT.lines():
            terminalreporter.write_line(line)


def pytest_sessionfinish(session, exitstatus) -> None:
    REPORT.write_if_requested()
