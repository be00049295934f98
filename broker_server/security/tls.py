"""Server-side TLS for the broker and the name server: `--tls-cert`, `--tls-key` and, for
mutual TLS, `--tls-client-ca` (clients must then present a certificate signed by that CA)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc import aio

from rmq.broker_server.errors import UserError


@dataclass(frozen=True)
class ServerTls:
    cert_file: Path
    key_file: Path
    client_ca_file: Path | None = None

    @classmethod
    def from_args(cls, cert: str | None, key: str | None, client_ca: str | None) -> ServerTls | None:
        """None when no TLS flag is given; UserError when the flags do not make a whole set."""
        if not (cert or key or client_ca):
            return None
        if not (cert and key):
            raise UserError("TLS needs both --tls-cert and --tls-key")
        return cls(Path(cert), Path(key), Path(client_ca) if client_ca else None)

    def credentials(self) -> grpc.ServerCredentials:
        """Read the PEM files; UserError naming the flag and file when one is unusable."""
        cert, key, client_ca = self.pem_files()
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
        )

    def pem_files(self) -> tuple[bytes, bytes, bytes | None]:
        """(certificate chain, private key, client CA or None), read and checked as PEM."""
        cert = _read_pem(self.cert_file, "--tls-cert", b"CERTIFICATE")
        key = _read_pem(self.key_file, "--tls-key", b"PRIVATE KEY")
        client_ca = None
        if self.client_ca_file is not None:
            client_ca = _read_pem(self.client_ca_file, "--tls-client-ca", b"CERTIFICATE")
        return cert, key, client_ca


def add_port(server: aio.Server, address: str, tls: ServerTls | None) -> int:
    """Bind `address` with TLS when configured, in plaintext otherwise; returns the port."""
    try:
        if tls is None:
            port = server.add_insecure_port(address)
        else:
            port = server.add_secure_port(address, tls.credentials())
    except RuntimeError:   # grpc raises RuntimeError when it cannot bind
        port = 0
    if port == 0:
        raise UserError(f"cannot listen on {address}: the address is in use or not available on this host")
    return int(port)


def _read_pem(path: Path, flag: str, marker: bytes) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise UserError(f"{flag} {path}: {error.strerror or error}") from None
    if b"-----BEGIN " not in data or marker not in data:
        raise UserError(f"{flag} {path}: not a PEM file with a {marker.decode()}")
    return data
