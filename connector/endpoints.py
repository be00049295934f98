"""Parsing of the `endpoints` setting: name server(s) or broker(s) as `host:port[,host:port]`."""

from __future__ import annotations

from rmq.connector.errors import ConfigError

FORMAT_HINT = "expected host:port[,host:port]"


def parse_endpoints(text: str) -> list[str]:
    """The addresses in `text`, in order and without duplicates.

    Raises ConfigError (a ValueError) naming the offending entry when one is not `host:port` with a port
    in 1..65535 (IPv6 hosts in brackets: `[::1]:9876`).
    """
    if not text or not text.strip():
        raise ConfigError(f"endpoints is empty: {FORMAT_HINT}")
    addresses: list[str] = []
    for entry in (part.strip() for part in text.split(",")):
        _check_address(entry, text)
        if entry not in addresses:
            addresses.append(entry)
    return addresses


def _check_address(entry: str, text: str) -> None:
    host, separator, port = entry.rpartition(":")
    if not entry:
        problem = "an empty entry"
    elif not separator or not host:
        problem = f"{entry!r} has no host:port"
    elif host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
        problem = f"{entry!r} has a malformed host (IPv6 addresses go in brackets)"
    elif not port.isdigit() or not 1 <= int(port) <= 65535:
        problem = f"{entry!r} has an invalid port {port!r} (1..65535)"
    else:
        return
    raise ConfigError(f"invalid endpoints {text!r}: {problem}; {FORMAT_HINT}")
