"""Whether a server that closed a plaintext connection speaks TLS: a gRPC call without TLS to a
TLS-only port only learns "Socket closed", so the client tries one TLS handshake (nothing
verified, nothing sent after it) to say "the server requires TLS" instead."""

from __future__ import annotations

import socket
import ssl

PROBE_TIMEOUT_S = 2.0


def speaks_tls(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True when `host:port` completes a TLS handshake offering HTTP/2 (as gRPC does)."""
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout_s) as raw, \
                context.wrap_socket(raw, server_hostname=host.strip("[]")):
            return True
    except (OSError, ValueError):
        return False
