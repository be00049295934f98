"""Figures collector for the reliability scenarios.

Every scenario records what it sent, what the broker acknowledged, what was read back and
how many acknowledged messages were lost or read more than once (plus free-form extra
figures such as throughput or p99 latency), each computed from its own count. Each record
prints one line in the test output; the terminal summary repeats the table, and `make
reliability` (env RMQ_RELIABILITY_REPORT=1) writes the whole of RELIABILITY.md from the run: the
commit measured, the test outcome (skips with their reasons), the scenario and bad-input tables.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Hashable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.machine import source
from integration_tests.chaos.report import kept_section

REPORT_ENV = "RMQ_RELIABILITY_REPORT"
REPORT_PATH = Path(__file__).resolve().parents[2] / "RELIABILITY.md"
COMMAND = "make reliability"


@dataclass
class ScenarioFigures:
    scenario: str
    sent: int
    acknowledged: int
    read: int
    lost: int
    duplicated: int
    notes: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def line(self) -> str:
        extra = "".join(f" {name}={value}" for name, value in self.extra.items())
        return (f"[reliability] {self.scenario}: sent={self.sent} acknowledged={self.acknowledged} "
                f"read={self.read} lost={self.lost} duplicated={self.duplicated}{extra}")


def tally(scenario: str, sent: int, acknowledged: Iterable[Hashable], read: Iterable[Hashable],
          notes: str = "", **extra: object) -> ScenarioFigures:
    """Figures from the keys the broker acknowledged and the keys read back (one key per read
    message, repeats included): lost = acknowledged keys never read, duplicated = extra reads."""
    acknowledged_keys = set(acknowledged)
    read_counts = Counter(read)
    return ScenarioFigures(
        scenario=scenario,
        sent=sent,
        acknowledged=len(acknowledged_keys),
        read=sum(read_counts.values()),
        lost=len(acknowledged_keys - read_counts.keys()),
        duplicated=sum(count - 1 for count in read_counts.values()),
        notes=notes,
        extra={name: str(value) for name, value in extra.items()},
    )


@dataclass(frozen=True)
class BadInput:
    """One hostile or mistaken input and the error the user sees for it."""

    surface: str     # "CLI", "connector option", "gRPC"
    given: str
    error: str


@dataclass(frozen=True)
class RunOutcome:
    """How the pytest run ended: counts per outcome, and why tests were skipped."""

    counts: dict[str, int]
    skipped: list[str]
    seconds: float


@dataclass(frozen=True)
class ResourceTable:
    """A broker's resource figures over one scenario (resource_samples.FigureSummary.cells rows)."""

    scenario: str
    notes: str
    rows: list[list[str]]


@dataclass
class ReliabilityReport:
    scenarios: list[ScenarioFigures] = field(default_factory=list)
    bad_inputs: list[BadInput] = field(default_factory=list)
    resources: list[ResourceTable] = field(default_factory=list)

    def record_resources(self, scenario: str, notes: str, rows: list[list[str]]) -> None:
        self.resources.append(ResourceTable(scenario, notes, rows))
        for row in rows:
            print(f"[reliability] {scenario}: " + " ".join(row))

    def record(self, figures: ScenarioFigures) -> ScenarioFigures:
        self.scenarios.append(figures)
        print(figures.line())
        return figures

    def record_bad_input(self, surface: str, given: str, error: str) -> None:
        self.bad_inputs.append(BadInput(surface, given, error))

    def as_data(self) -> dict[str, list[dict[str, Any]]]:
        """Plain data: what a pytest-xdist worker hands to the controller (`merge`)."""
        return asdict(self)

    def merge(self, data: dict[str, list[dict[str, Any]]]) -> None:
        """Adds what a pytest-xdist worker recorded (`as_data`)."""
        self.scenarios += [ScenarioFigures(**figures) for figures in data["scenarios"]]
        self.bad_inputs += [BadInput(**bad) for bad in data["bad_inputs"]]
        self.resources += [ResourceTable(**table) for table in data["resources"]]

    def in_order(self) -> list[ScenarioFigures]:
        """By the scenario number each name starts with (numerically), in run order within one."""
        return sorted(self.scenarios, key=lambda figures: int(figures.scenario.split(" ", 1)[0]))

    def lines(self) -> list[str]:
        return [figures.line() for figures in self.in_order()]

    def markdown(self, outcome: RunOutcome) -> str:
        counts = ", ".join(f"{count} {name}" for name, count in sorted(outcome.counts.items()))
        out = [
            "# rmq reliability figures",
            "",
            f"Measured at {source(REPORT_PATH.parent)} by `{COMMAND}`",
            f"({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {outcome.seconds / 60:.1f} minutes: {counts})",
            "from the scenarios in `integration_tests/reliability/`: real broker and Spark processes, real",
            "`kill -9`, power cuts (LazyFS), corrupt files, load and hostile input. *lost* counts",
            "acknowledged messages never read back, *duplicated* counts extra reads of a message already",
            "read. The whole file is written by the run (the chaos section by `make chaos`); nothing in it",
            "is edited by hand.",
            "",
            *[f"- skipped: {reason}" for reason in outcome.skipped],
            *([""] if outcome.skipped else []),
            "| scenario | sent | acknowledged | read | lost | duplicated | notes |",
            "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for f in self.in_order():
            notes = "; ".join(filter(None, [f.notes, *(f"{k} {v}" for k, v in f.extra.items())]))
            out.append(f"| {f.scenario} | {f.sent} | {f.acknowledged} | {f.read} | {f.lost} | "
                       f"{f.duplicated} | {_cell(notes)} |")
        for table in self.resources:
            out += ["", f"## Resources: {table.scenario}", "", table.notes, "",
                    "| figure | start | max | end | slope per minute |",
                    "| --- | ---: | ---: | ---: | ---: |",
                    *(f"| {' | '.join(_cell(cell) for cell in row)} |" for row in table.rows)]
        out += ["", "## Bad input and the error it gets", "",
                "| surface | input | error shown |", "| --- | --- | --- |"]
        for bad in self.bad_inputs:
            out.append(f"| {bad.surface} | `{_cell(bad.given)}` | {_cell(bad.error)} |")
        return "\n".join(out) + "\n"

    def write_if_requested(self, outcome: RunOutcome) -> None:
        if os.environ.get(REPORT_ENV) == "1" and (self.scenarios or self.bad_inputs or self.resources):
            kept = kept_section(REPORT_PATH.read_text()) if REPORT_PATH.exists() else ""   # `make chaos`'s
            REPORT_PATH.write_text(self.markdown(outcome) + (f"\n{kept}\n" if kept else ""))


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


REPORT = ReliabilityReport()
