"""A subpackage's public names, imported when first used (PEP 562): its `__init__` names them
without importing its modules, so importing one module of a subpackage never imports the others
(which would make import cycles between subpackages)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, Sequence[str]]
) -> tuple[list[str], Callable[[str], Any]]:
    """`__all__` and the module `__getattr__` of `package`, exporting each module's listed names."""
    home = {name: module for module, names in exports.items() for name in names}

    def getattr_(name: str) -> Any:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return sorted(home), getattr_
