"""The broker's small JSON config files under `<store>/config/` (topics, consumer offsets,
delay offsets; RocketMQ ConfigManager): written atomically (temp file, fsync, rename), so a
crash leaves either the old or the new content, never half a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rmq.store.private_files import write_durably


def write_json_atomically(path: Path, content: Any) -> None:
    write_durably(path, json.dumps(content, indent=2, sort_keys=True).encode())


def read_json(path: Path) -> Any | None:
    """The file's content, or None when it does not exist. A corrupt file raises ValueError
    naming it: the broker refuses to start rather than silently forgetting state."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from error
