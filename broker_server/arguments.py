"""argparse value types shared by the `rmq` commands (each error is one clear line)."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def _positive(parse: Callable[[str], float], kind: str) -> Callable[[str], float]:
    def parse_positive(text: str) -> float:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind}, got {text}")
        return value

    return parse_positive


positive_int = _positive(int, "integer")
positive_float = _positive(float, "number")
