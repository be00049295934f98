"""BENCHMARKS.md, generated entirely from one run: every table and figure comes from the
run's rows, every explanation from the benchmark code (section docstrings, row notes); no
hand-written figures survive a run. The header names the commit measured.

The one hand-written part is bench/NOTES.md (what was tried, what it gained, what bounds a
missed row), included as written at the end: its figures come from the runs it cites."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.harness import Row, format_stats, format_table, table_cell

NOTES = Path(__file__).with_name("NOTES.md")


@dataclass
class SectionResult:
    key: str
    title: str
    description: str
    rows: list[Row]
    seconds: float


@dataclass(frozen=True)
class RunInfo:
    command: str          # Markdown, e.g. "`make bench`"
    started: str          # UTC, minutes
    seconds: float
    quick: bool
    source: str           # the commit measured (bench.machine.facts "source")
    facts: dict[str, str]


def render(sections: Sequence[SectionResult], run: RunInfo) -> str:
    parts = [
        "# rmq benchmarks",
        f"Measured at {run.source} by {run.command} on {run.started} UTC with "
        f"{'quick smoke' if run.quick else 'full'} sizes; the run took {run.seconds / 60:.1f} minutes. "
        "`make bench` writes this whole file from the run: nothing in it is edited by hand "
        "except the closing notes, included as written from `bench/NOTES.md`.",
        _how_to_read(),
        "## Machine\n\n" + "\n".join(f"- {name}: {value}" for name, value in run.facts.items()),
        "## Targets\n\n" + _targets_table(sections),
        *(_section(section) for section in sections),
        *_notes(),
    ]
    return "\n\n".join(parts) + "\n"


def _notes() -> list[str]:
    """bench/NOTES.md as written (nothing when it is absent)."""
    return [NOTES.read_text().strip()] if NOTES.exists() else []


def _how_to_read() -> str:
    return (
        "## How to read the tables\n\n"
        "- Each figure is the **median over repeated runs**, the min–max spread in brackets; the\n"
        "  reference is measured **in the same run**, alternating with the rmq runs so that load\n"
        "  from other processes on this shared machine hits both alike.\n"
        "- **ratio = rmq ÷ reference** (medians). For throughput higher is better; for latency\n"
        "  lower is better.\n"
        "- Brokers run as real `rmq broker` processes on loopback with **ASYNC flush** (the\n"
        "  throughput rows measure the broker, not the disk). Redis runs as Debian's\n"
        "  `redis-server` on loopback with no persistence (`--save '' --appendonly no`), driven\n"
        "  through redis-py. Spark runs `local[2]` in the benchmark process."
    )


def _targets_table(sections: Sequence[SectionResult]) -> str:
    lines = ["| section | row | rmq | ratio | target | result |", "| --- | --- | --- | --- | --- | --- |"]
    for section in sections:
        for row in section.rows:
            if row.target is None:
                continue
            value = format_stats(row.value, row.unit) if row.value is not None else row.note
            ratio = "—" if row.ratio is None else f"{row.ratio:.2f}×"
            cells = [section.title, row.name, value, ratio, row.target.describe(), row.verdict]
            lines.append("| " + " | ".join(table_cell(cell) for cell in cells) + " |")
    return "\n".join(lines)


def _section(section: SectionResult) -> str:
    return (
        f"## {section.title}\n\n{section.description}\n\n{format_table(section.rows)}\n\n"
        f"_Section time: {section.seconds:.0f} s._"
    )
