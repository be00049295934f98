"""How the CLI prints: aligned tables for people, `--json` for scripts, ISO-8601 UTC times."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def print_table(headers: list[str], rows: list[list[Any]]) -> None:
    cells = [headers] + [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def timestamp(epoch_ms: int) -> str:
    if epoch_ms <= 0:
        return "-"
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).isoformat(timespec="milliseconds")
