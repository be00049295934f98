"""Every import statement in the README's Python code blocks runs (from a directory outside
the checkout, so only the installed `rmq` names can satisfy them)."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_imports() -> list[str]:
    statements = []
    for block in re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S):
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Import | ast.ImportFrom):
                statements.append(ast.unparse(node))
    return statements


def test_the_readme_imports_run(tmp_path: Path) -> None:
    statements = readme_imports()
    assert any("RmqError" in s for s in statements)   # the blocks were found
    result = subprocess.run([sys.executable, "-c", "\n".join(statements)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
