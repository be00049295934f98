"""ACL files as servers accept them: readable and writable by their owner only (chmod 600)."""

from __future__ import annotations

import os
from pathlib import Path

ACL_FILE_MODE = 0o600


def write_acl(path: Path, text: str) -> Path:
    """Write `text` to `path` with mode 0600 (an ACL file other users may read is refused)."""
    path.touch(mode=ACL_FILE_MODE)
    os.chmod(path, ACL_FILE_MODE)
    path.write_text(text)
    return path
