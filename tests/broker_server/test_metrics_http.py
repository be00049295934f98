"""The /metrics endpoint (issue #25 weaknesses): beyond loopback on an --acl server it answers only
an admin account's HTTP Basic credentials, over the server's TLS; it serves a bounded number of
connections, each with a timeout, instead of a thread per connection without one."""

from __future__ import annotations

import base64
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from rmq.broker_server.errors import UserError
from rmq.broker_server.metrics.collectors import check_metrics_listen
from rmq.broker_server.metrics.metrics_http import MAX_SCRAPERS, MetricsHttpServer
from rmq.broker_server.security.acl import parse_acl
from rmq.broker_server.security.acl_file import AclFile
from rmq.broker_server.security.refusal_log import RefusalLog
from rmq.broker_server.security.server_security import ServerSecurity
from rmq.broker_server.security.tls import ServerTls
from tests.acl_files import write_acl
from tests.tls_certs import TlsFiles, make_tls_files
from tests.waiting import wait_until

REQUEST_TIMEOUT_S = 3.0   # far above the moment the test needs to see a connection refused
ACL = parse_acl({"accounts": [
    {"accessKey": "monitor01", "secretKey": "monitor-secret", "admin": True},
    {"accessKey": "consumer1", "secretKey": "consumer-secret", "topicPerms": ["orders=SUB"]},
]}, "test")


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def server(tls_files: TlsFiles) -> Iterator[MetricsHttpServer]:
    running = MetricsHttpServer(("127.0.0.1", 0), CollectorRegistry(), lambda: ACL,
                                ServerTls(tls_files.server_cert, tls_files.server_key), RefusalLog(),
                                request_timeout_s=REQUEST_TIMEOUT_S).start()
    yield running
    running.stop()


def scrape(server: MetricsHttpServer, tls_files: TlsFiles, credentials: str | None) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(tls_files.ca))
    request = urllib.request.Request(f"https://127.0.0.1:{server.port}/metrics")
    if credentials is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(credentials.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def test_scrapes_need_an_admin_accounts_credentials(server: MetricsHttpServer, tls_files: TlsFiles) -> None:
    status, body = scrape(server, tls_files, None)
    assert (status, body) == (401, "scrapes need HTTP Basic credentials of an admin account\n")
    status, body = scrape(server, tls_files, "monitor01:wrong-secret")
    assert status == 401 and "unknown access key or wrong secret key" in body
    assert "wrong-secret" not in body
    status, body = scrape(server, tls_files, "consumer1:consumer-secret")
    assert status == 403 and "is not an admin account" in body
    status, body = scrape(server, tls_files, "monitor01:monitor-secret")
    assert status == 200 and "python_info" not in body   # the registry as given, in the text format


def test_connections_are_bounded_and_time_out(server: MetricsHttpServer, tls_files: TlsFiles) -> None:
    """Before, each connection got a thread of its own and kept it as long as it stayed silent."""
    silent = [socket.create_connection(("127.0.0.1", server.port), timeout=10) for _ in range(MAX_SCRAPERS)]
    wait_until(lambda: server.serving() == MAX_SCRAPERS, "every worker serves a silent connection")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as one_more:
        assert one_more.recv(1) == b""                        # closed at once, not queued
    for connection in silent:                                # while the silent ones are still open
        connection.setblocking(False)
        with pytest.raises(BlockingIOError):
            connection.recv(1)
    for connection in silent:                                # closed by the server at its timeout
        connection.settimeout(10)
        assert connection.recv(1) == b""
        connection.close()
    wait_until(lambda: server.serving() == 0, "the workers are free again")
    assert scrape(server, tls_files, "monitor01:monitor-secret")[0] == 200


def test_beyond_loopback_an_acl_server_needs_tls_for_its_metrics(tmp_path: Path, tls_files: TlsFiles) -> None:
    acl = AclFile(write_acl(tmp_path / "acl.yml", "accounts:\n  - {accessKey: monitor01, secretKey: "
                                                  "monitor-secret, admin: true}\n"))
    tls = ServerTls(tls_files.server_cert, tls_files.server_key)
    with pytest.raises(UserError, match="with --acl a non-loopback metrics address needs --tls-cert"):
        check_metrics_listen("0.0.0.0:9100", ServerSecurity(acl_file=acl))
    with pytest.raises(UserError, match="a non-loopback metrics address needs --acl or TLS"):
        check_metrics_listen("0.0.0.0:9100", ServerSecurity())
    assert check_metrics_listen("0.0.0.0:9100", ServerSecurity(acl_file=acl, tls=tls)) == ("0.0.0.0", 9100)
    assert check_metrics_listen("127.0.0.1:9100", ServerSecurity(acl_file=acl)) == ("127.0.0.1", 9100)
