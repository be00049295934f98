"""Every import statement in the Python code blocks of README.md and the manual (docs/manual/)
runs (from a directory outside the checkout, so only the installed `rmq` names can satisfy them)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs" / "manual").glob("*.md"))]


def documented_imports() -> list[str]:
    statements = []
    for page in PAGES:
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S):
            for node in ast.walk(ast.parse(block)):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    statements.append(ast.unparse(node))
    return statements


def test_the_documented_imports_run(tmp_path: Path) -> None:
    statements = documented_imports()
    assert any("RmqError" in s for s in statements)   # the manual's blocks were found
    assert any("rmq.connector import register" in s for s in statements)
    result = subprocess.run([sys.executable, "-c", "\n".join(statements)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
