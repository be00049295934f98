"""Figures of the security attack tests (test_security_attacks.py): each test
records the attack, what it did and what the server did; with RMQ_RELIABILITY_REPORT=1 (as in
`make reliability`) the table replaces the figures section of SECURITY.md."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from integration_tests.reliability.report import REPORT_ENV

REPORT_PATH = Path(__file__).resolve().parents[2] / "SECURITY.md"
START, END = "<!-- attack-figures:start -->", "<!-- attack-figures:end -->"
COMMAND = "make reliability"


@dataclass(frozen=True)
class AttackFigures:
    attack: str
    attempted: str
    outcome: str

    def line(self) -> str:
        return f"[security] {self.attack}: {self.attempted} -> {self.outcome}"


@dataclass
class SecurityReport:
    attacks: list[AttackFigures] = field(default_factory=list)

    def record(self, attack: str, attempted: str, outcome: str) -> None:
        figures = AttackFigures(attack, attempted, outcome)
        self.attacks.append(figures)
        print(figures.line())

    def table(self) -> str:
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        rows = "\n".join(f"| {a.attack} | {a.attempted} | {a.outcome} |" for a in self.attacks)
        return (f"Measured {stamp} on loopback by `{COMMAND}`:\n\n"
                f"| attack | what the test did | what the server did |\n|---|---|---|\n{rows}\n")

    def write_if_asked(self) -> None:
        if os.environ.get(REPORT_ENV) != "1" or not self.attacks or not REPORT_PATH.exists():
            return
        text = REPORT_PATH.read_text()
        head, _, rest = text.partition(START)
        _, _, tail = rest.partition(END)
        REPORT_PATH.write_text(f"{head}{START}\n{self.table()}{END}{tail}")
