"""What every `rmq` command shares, server and client alike: `UserError` (bad arguments or input,
reported as one clear line instead of a traceback), argparse value types, and whether a
`--listen` address stays on loopback."""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Callable
from typing import TypeVar


class UserError(Exception):
    """Bad arguments or input from the user; the message is shown as is."""


Number = TypeVar("Number", int, float)


def _at_least(parse: Callable[[str], Number], kind: str, zero: bool = False) -> Callable[[str], Number]:
    """An argparse type: `parse(text)`, positive (or, with `zero`, also 0)."""
    wanted = f"a {'non-negative' if zero else 'positive'} {kind}"

    def parse_bounded(text: str) -> Number:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}") from None
        if value < 0 or (value == 0 and not zero):
            raise argparse.ArgumentTypeError(f"expected {wanted}, got {text}")
        return value

    return parse_bounded


positive_int = _at_least(int, "integer")
positive_float = _at_least(float, "number")
non_negative_int = _at_least(int, "integer", zero=True)


def is_loopback(listen: str) -> bool:
    """Whether `host:port` listens on loopback only (`localhost`, 127.0.0.0/8, ::1)."""
    host = listen.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
