"""Hooks that print the reliability figures at the end of the run and write RELIABILITY.md
(with the run's outcome) when RMQ_RELIABILITY_REPORT=1 (`make reliability`); normal test runs
leave the file alone."""

from __future__ import annotations

import time

import pytest

from integration_tests.reliability.report import REPORT, ReliabilityReport, RunOutcome

STARTED = time.monotonic()     # conftest import: the start of the session's collection


@pytest.fixture
def report() -> ReliabilityReport:
    return REPORT


def pytest_terminal_summary(terminalreporter) -> None:
    if REPORT.scenarios:
        terminalreporter.section("reliability figures")
        for line in REPORT.lines():
            terminalreporter.write_line(line)
    stats = terminalreporter.stats
    counts = {name: len(stats.get(name, [])) for name in ("passed", "failed", "error", "skipped")}
    skipped = sorted({f"{report.nodeid.split('::')[-1]}: {report.longrepr[2]}"
                      for report in stats.get("skipped", []) if isinstance(report.longrepr, tuple)})
    seconds = time.monotonic() - STARTED
    REPORT.write_if_requested(RunOutcome({k: v for k, v in counts.items() if v}, skipped, seconds))
