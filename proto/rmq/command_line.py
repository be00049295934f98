"""What every `rmq` command shares, server and client alike: `UserError` (bad arguments or input,
reported as one clear line instead of a traceback), argparse value types, and whether a
`--listen` address stays on loopback."""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Callable


class UserError(Exception):
    """Bad arguments or input from the user; the message is shown as is."""


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


def is_loopback(listen: str) -> bool:
    """Whether `host:port` listens on loopback only (`localhost`, 127.0.0.0/8, ::1)."""
    host = listen.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
