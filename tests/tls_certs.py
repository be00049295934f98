"""Throwaway TLS material for tests, made with the `openssl` CLI at test time (no private key
is committed): a CA, a server certificate for 127.0.0.1/localhost and a client certificate,
both signed by the CA, plus an unrelated second CA."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path       # a CA that signed nothing here: verifying with it must fail


def make_tls_files(directory: Path) -> TlsFiles:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to generate test certificates")
    directory.mkdir(parents=True, exist_ok=True)
    _make_ca(directory, "ca")
    _make_ca(directory, "other-ca")
    _make_leaf(directory, "server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                          "extendedKeyUsage=serverAuth\n")
    _make_leaf(directory, "client", "ca", "extendedKeyUsage=clientAuth\n")
    return TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key",
                    directory / "client.pem", directory / "client.key", directory / "other-ca.pem")


def _openssl(directory: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)


def _new_key_args(name: str) -> list[str]:
    return ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key"]


def _make_ca(directory: Path, name: str) -> None:
    _openssl(directory, "req", "-x509", *_new_key_args(name), "-out", f"{name}.pem", "-days", "2",
             "-subj", f"/CN=rmq test {name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")


def _make_leaf(directory: Path, name: str, ca: str, extensions: str) -> None:
    (directory / f"{name}.ext").write_text("basicConstraints=CA:FALSE\n" + extensions)
    _openssl(directory, "req", *_new_key_args(name), "-out", f"{name}.csr", "-subj", f"/CN={name}")
    _openssl(directory, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext")
