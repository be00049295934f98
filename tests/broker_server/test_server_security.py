"""Server security flags: loading the ACL and TLS files, the start-up notice, ACL watching."""

from __future__ import annotations

import argparse
import asyncio
import logging
from pathlib import Path

import pytest

from rmq.auth import ClientSecurity
from rmq.broker_server.errors import UserError
from rmq.broker_server.security import server_security
from rmq.broker_server.security.acl import Perm
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.command_line import is_loopback
from tests.acl_files import write_acl

ACL = "accounts:\n  - {accessKey: user01, secretKey: 'topsecret1', topicPerms: ['orders=PUB']}\n"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    server_security.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize(("listen", "loopback"), [
    ("127.0.0.1:10911", True), ("localhost:1", True), ("[::1]:10911", True), ("127.3.2.1:5", True),
    ("0.0.0.0:10911", False), ("10.0.0.5:10911", False), ("[::]:10911", False), ("broker.example:1", False),
])
def test_is_loopback(listen: str, loopback: bool) -> None:
    assert is_loopback(listen) is loopback


def test_no_flags_means_no_interceptor_and_plaintext() -> None:
    security = ServerSecurity.from_args(parse())
    assert security.interceptors("broker/broker-a") == []
    assert security.transport == "plaintext"


def test_acl_flag_loads_the_file(tmp_path: Path) -> None:
    write_acl(tmp_path / "acl.yml", ACL)
    security = ServerSecurity.from_args(parse("--acl", str(tmp_path / "acl.yml"), "--signature-window", "5"))
    assert len(security.interceptors("broker/broker-a")) == 2     # rmq.v1 and RocketMQ 5 signatures
    assert security.signature_window_s == 5
    assert list(security.acl_file.acl.accounts) == ["user01"]


def test_bad_acl_file_is_one_user_error(tmp_path: Path) -> None:
    write_acl(tmp_path / "acl.yml", ACL.replace("PUB", "PUSH"))
    with pytest.raises(UserError, match=r"acl.yml: accounts\[0\] .*unknown permission 'PUSH'"):
        ServerSecurity.from_args(parse("--acl", str(tmp_path / "acl.yml")))


def test_tls_flags_are_checked_at_start(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="TLS needs both --tls-cert and --tls-key"):
        ServerSecurity.from_args(parse("--tls-cert", "cert.pem"))
    with pytest.raises(UserError, match=r"--tls-cert .*missing.pem: No such file"):
        ServerSecurity.from_args(parse("--tls-cert", str(tmp_path / "missing.pem"), "--tls-key", "k.pem"))


def test_signature_window_must_be_positive(capsys) -> None:
    with pytest.raises(SystemExit):
        parse("--signature-window", "0")
    assert "expected a positive number, got 0" in capsys.readouterr().err


def test_listening_beyond_loopback_needs_an_acl_or_insecure_listen(tmp_path: Path) -> None:
    ServerSecurity.from_args(parse()).check_listen("127.0.0.1:10911")
    with pytest.raises(UserError, match=r"refusing to listen on 0.0.0.0:10911 without --acl: .*--insecure"):
        ServerSecurity.from_args(parse()).check_listen("0.0.0.0:10911")
    ServerSecurity.from_args(parse("--insecure-listen")).check_listen("0.0.0.0:10911")
    write_acl(tmp_path / "acl.yml", ACL)
    ServerSecurity.from_args(parse("--acl", str(tmp_path / "acl.yml"))).check_listen("0.0.0.0:10911")


def test_connection_limits_and_nonce_budget_flags() -> None:
    security = ServerSecurity.from_args(parse("--max-connections", "64", "--idle-timeout", "2.5",
                                              "--nonce-budget", "100"))
    assert (security.max_connections, security.idle_timeout_s, security.nonce_budget) == (64, 2.5, 100)
    defaults = ServerSecurity.from_args(parse())
    assert (defaults.max_connections, defaults.idle_timeout_s, defaults.nonce_budget) == (None, 60.0, 20_000)


def run_start(security: ServerSecurity, listen: str) -> None:
    async def scenario() -> None:
        security.start(listen)
        await security.stop()

    asyncio.run(scenario())


def test_start_says_when_every_caller_is_trusted(caplog) -> None:
    caplog.set_level(logging.INFO, logger="rmq.security")
    run_start(ServerSecurity(), "127.0.0.1:10911")
    assert "no --acl: every caller is trusted, so listening on loopback 127.0.0.1:10911 only" in caplog.text
    caplog.clear()
    run_start(ServerSecurity(insecure_listen=True), "0.0.0.0:10911")
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert "no --acl but listening on 0.0.0.0:10911 beyond loopback" in caplog.text


def test_start_watches_the_acl_file(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.INFO)
    path = write_acl(tmp_path / "acl.yml", ACL)
    security = ServerSecurity.from_args(parse("--acl", str(path)))
    security.poll_interval_s = 0.01

    async def scenario() -> None:
        security.start("0.0.0.0:10911")
        path.write_text(ACL.replace("orders=PUB", "orders=SUB"))
        async with asyncio.timeout(10):
            while security.acl_file.acl.account("user01").topic_perms["orders"] != Perm.SUB:
                await asyncio.sleep(0.01)
        await security.stop()

    asyncio.run(scenario())
    assert (f"ACL {path} in force: 1 account(s), signed calls within -60s/+5s, 20000 nonces per account "
            f"(plaintext)") in caplog.text
    assert "ACL reloaded" in caplog.text


def test_outgoing_calls_take_credentials_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("RMQ_ACCESS_KEY", "broker01")
    monkeypatch.setenv("RMQ_SECRET_KEY", "broker-secret")
    monkeypatch.setenv("RMQ_TLS", "1")
    security = ServerSecurity.from_args(parse())
    assert security.outgoing.credentials().access_key == "broker01"
    assert security.outgoing.tls
    assert "broker-secret" not in repr(security)
    monkeypatch.setenv("RMQ_TLS", "perhaps")
    with pytest.raises(UserError, match=r"\$RMQ_TLS must be"):
        ServerSecurity.from_args(parse())


def test_no_environment_means_plain_outgoing_calls(monkeypatch) -> None:
    for name in ("RMQ_ACCESS_KEY", "RMQ_SECRET_KEY", "RMQ_TLS", "RMQ_TLS_CA_FILE"):
        monkeypatch.delenv(name, raising=False)
    assert ServerSecurity.from_args(parse()).outgoing == ClientSecurity()
