"""CLI credentials and TLS: flags, environment variables, and a secret never taken from argv."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from rmq.auth import ClientSecurity
from rmq.broker_server.errors import UserError
from rmq.cli import client_security


def security(*argv: str, **environ: str) -> ClientSecurity:
    parser = argparse.ArgumentParser()
    client_security.add_arguments(parser)
    return client_security.client_security(parser.parse_args(list(argv)), environ)


def test_nothing_given_is_a_plain_client() -> None:
    assert security() == ClientSecurity()


def test_environment_gives_credentials_and_tls(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    got = security(RMQ_ACCESS_KEY="user01", RMQ_SECRET_KEY="topsecret1", RMQ_TLS_CA_FILE=str(ca))
    assert got == ClientSecurity("user01", "topsecret1", True, str(ca))
    assert "topsecret1" not in repr(got)


def test_flags_win_over_the_environment() -> None:
    got = security("--access-key", "flaguser", "--tls", RMQ_ACCESS_KEY="envuser", RMQ_SECRET_KEY="topsecret1",
                   RMQ_TLS="0")
    assert (got.access_key, got.tls) == ("flaguser", True)


def test_there_is_no_secret_key_flag() -> None:
    parser = argparse.ArgumentParser()
    client_security.add_arguments(parser)
    assert all("secret" not in option for action in parser._actions for option in action.option_strings)


def test_client_certificate_from_flags_or_environment(tmp_path: Path) -> None:
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("-----BEGIN CERTIFICATE-----\n")
    key.write_text("-----BEGIN PRIVATE KEY-----\n")
    from_flags = security("--tls-cert", str(cert), "--tls-key", str(key))
    assert from_flags == ClientSecurity(tls=True, tls_cert_file=str(cert), tls_key_file=str(key))
    assert from_flags.tls_settings().cert_file == cert and from_flags.tls_settings().key_file == key
    from_environment = security(RMQ_TLS_CERT_FILE=str(cert), RMQ_TLS_KEY_FILE=str(key))
    assert from_environment == from_flags
    assert from_flags.client_kwargs()["tls_cert_file"] == str(cert)


@pytest.mark.parametrize(("argv", "environ", "message"), [
    (["--tls-cert", "/nonexistent/c.pem"], {},
     r"needs both --tls-cert \(\$RMQ_TLS_CERT_FILE\) and --tls-key"),
    ([], {"RMQ_TLS_KEY_FILE": "/nonexistent/c.key"}, r"needs both --tls-cert"),
    (["--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/c.key"], {},
     r"TLS client certificate file /nonexistent/c.pem does not exist"),
    (["--access-key", "user01"], {}, r"\$RMQ_SECRET_KEY is not set"),
    ([], {"RMQ_SECRET_KEY": "topsecret1"}, r"no access key: give --access-key or \$RMQ_ACCESS_KEY"),
    ([], {"RMQ_TLS": "maybe"}, r"\$RMQ_TLS must be 1/true/yes or 0/false/no, not 'maybe'"),
    (["--tls-ca-file", "/nonexistent/ca.pem"], {}, r"TLS CA file /nonexistent/ca.pem does not exist"),
])
def test_bad_settings_are_one_clear_line(argv: list[str], environ: dict, message: str) -> None:
    with pytest.raises(UserError, match=message) as raised:
        security(*argv, **environ)
    assert "topsecret1" not in str(raised.value)


@pytest.mark.parametrize(("value", "tls"), [
    ("1", True), ("true", True), ("YES", True), ("0", False), ("", False),
])
def test_rmq_tls_values(value: str, tls: bool) -> None:
    assert security(RMQ_TLS=value).tls is tls
