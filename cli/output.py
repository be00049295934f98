"""How the CLI prints: aligned tables for people, `--json` for scripts, ISO-8601 UTC times."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

from rmq.connector.errors import RmqUnavailable


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


def uptime(boot_timestamp_ms: int) -> str:
    """How long ago a server started, as 3d 4h, 5h 6m or 7m 8s ("-" when it did not say)."""
    if boot_timestamp_ms <= 0:
        return "-"
    seconds = max(int(time.time() - boot_timestamp_ms / 1000), 0)
    days, hours, minutes = seconds // 86400, seconds // 3600 % 24, seconds // 60 % 60
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m {seconds % 60}s"


def incomplete_note(unreachable: dict[str, RmqUnavailable]) -> str:
    if not unreachable:
        return ""
    return f" (incomplete: without the queues of unreachable {', '.join(sorted(unreachable))})"


def incomplete_exit(unreachable: dict[str, RmqUnavailable]) -> int:
    """1 when brokers could not be reached: a script must not read a partial answer as healthy."""
    return 1 if unreachable else 0


def warn_unreachable(unreachable: dict[str, RmqUnavailable]) -> None:
    """One stderr line per broker that could not be reached (its queues are left out)."""
    for name, error in sorted(unreachable.items()):
        print(f"rmq: broker {name} is unreachable, its queues are left out: {error}", file=sys.stderr)


def unreachable_json(unreachable: dict[str, RmqUnavailable]) -> dict[str, str]:
    return {name: str(error) for name, error in sorted(unreachable.items())}
