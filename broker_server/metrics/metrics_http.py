"""The `/metrics` scrape endpoint (`--metrics-listen HOST:PORT`) of a broker or name server: a small
HTTP server on its own threads, bounded and protected like the gRPC port (how to scrape it: the
docs/manual/operations.md, "Monitoring").

- At most MAX_SCRAPERS connections are served at once, each by one of as many worker threads; a
  connection past that is closed at once (Prometheus scrapes again at its next interval). A
  connection must finish its TLS handshake and request within REQUEST_TIMEOUT_S and is closed
  after one answer, so a silent client holds a worker for at most that long and never a thread
  of its own.
- On a loopback address the endpoint answers without authentication (only local processes reach
  it). Beyond loopback the server needs --acl or TLS (check_metrics_listen); with --acl every
  scrape must carry HTTP Basic credentials of an admin account of the ACL in force (access key and
  secret key: `basic_auth` in Prometheus), checked with the account's and the ACL's allowed
  addresses; refusals go to the server's rate-limited refusal log. A server with --tls-cert serves
  the endpoint over TLS with the same certificate (and requires client certificates under
  --tls-client-ca), so the credentials never cross the network in the clear: with --acl, a
  non-loopback metrics address therefore needs --tls-cert.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import socket
import ssl
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from socketserver import TCPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from rmq.broker_server.errors import EdgeError
from rmq.broker_server.security.acl import Acl
from rmq.broker_server.security.refusal_log import RefusalLog
from rmq.broker_server.security.request_auth import key_label
from rmq.broker_server.security.tls import ServerTls

MAX_SCRAPERS = 4            # connections served at once
REQUEST_TIMEOUT_S = 10.0    # TLS handshake, request and answer of one connection
METRICS_PATHS = frozenset({"/metrics", "/"})
REALM = 'Basic realm="rmq metrics", charset="UTF-8"'


class ScrapeRefused(EdgeError):
    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(status, reason)
        self.reason = reason


def check_scraper(acl: Acl, authorization: str | None, address: str) -> str:
    """The admin account an `Authorization: Basic` header names, if its secret matches and it may
    call from `address`; ScrapeRefused otherwise (the same answer for an unknown key and a wrong
    secret)."""
    if not acl.address_allowed(address):
        raise ScrapeRefused(HTTPStatus.FORBIDDEN,
                            f"address {address} is not in globalWhiteRemoteAddresses")
    scheme, _, encoded = (authorization or "").partition(" ")
    if scheme.lower() != "basic":
        raise ScrapeRefused(HTTPStatus.UNAUTHORIZED,
                            "scrapes need HTTP Basic credentials of an admin account")
    try:
        access_key, _, secret_key = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        raise ScrapeRefused(HTTPStatus.UNAUTHORIZED, "malformed Basic credentials") from None
    account = acl.account(access_key)
    label = key_label(access_key)
    if account is None or not hmac.compare_digest(account.secret_key.encode(), secret_key.encode()):
        raise ScrapeRefused(HTTPStatus.UNAUTHORIZED, f"credentials not accepted for access key {label}: "
                                                     "unknown access key or wrong secret key")
    if not account.may_connect_from(address):
        raise ScrapeRefused(HTTPStatus.FORBIDDEN, f"access key {label} may not be used from {address}")
    if not account.admin:
        raise ScrapeRefused(HTTPStatus.FORBIDDEN,
                            f"access key {label} is not an admin account "
                            "(metrics name every topic and group)")
    return access_key


class MetricsHttpServer(TCPServer):
    allow_reuse_address = True
    request_queue_size = MAX_SCRAPERS * 4

    def __init__(self, address: tuple[str, int], registry: CollectorRegistry,
                 acl: Callable[[], Acl] | None, tls: ServerTls | None, refusals: RefusalLog,
                 request_timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _ScrapeHandler)
        self.registry = registry
        self.request_timeout_s = request_timeout_s
        self.acl = acl            # None: no authentication (a loopback address)
        self.refusals = refusals
        self.tls_context = _tls_context(tls) if tls is not None else None
        self._workers = ThreadPoolExecutor(MAX_SCRAPERS, thread_name_prefix="metrics")
        self._lock = threading.Lock()
        self._serving = 0   # connections handed to a worker and not yet closed
        self._thread = threading.Thread(target=self.serve_forever, name="metrics-accept", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def start(self) -> MetricsHttpServer:
        self._thread.start()
        return self

    def serving(self) -> int:
        """Connections being served now (tests and diagnostics)."""
        with self._lock:
            return self._serving

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._workers.shutdown(wait=True)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve on a worker when one is free; close the connection at once otherwise."""
        with self._lock:
            busy = self._serving >= MAX_SCRAPERS
            self._serving += 0 if busy else 1
        if busy:
            self.shutdown_request(request)
            return
        self._workers.submit(self._serve, request, client_address)

    def _serve(self, request: socket.socket, client_address: Any) -> None:
        try:
            request.settimeout(self.request_timeout_s)
            if self.tls_context is not None:
                request = self.tls_context.wrap_socket(request, server_side=True)
            self.finish_request(request, client_address)
        except (OSError, ssl.SSLError):
            pass   # a client that went away, timed out or failed the handshake: nothing to answer
        finally:
            self.shutdown_request(request)
            with self._lock:
                self._serving -= 1


class _ScrapeHandler(BaseHTTPRequestHandler):
    """One request per connection (HTTP/1.0); the socket carries the server's request timeout."""

    server: MetricsHttpServer

    def do_GET(self) -> None:   # noqa: N802 (http.server's name)
        path = self.path.partition("?")[0]
        if path not in METRICS_PATHS:
            self._answer(HTTPStatus.NOT_FOUND, b"only /metrics is served\n")
            return
        acl = self.server.acl
        if acl is not None:
            address = str(self.client_address[0])
            try:
                check_scraper(acl(), self.headers.get("Authorization"), address)
            except ScrapeRefused as refusal:
                self.server.refusals.record("GET /metrics", address, refusal.code.name, refusal.reason)
                self._answer(refusal.code, refusal.reason.encode() + b"\n",
                             challenge=refusal.code == HTTPStatus.UNAUTHORIZED)
                return
        self._answer(HTTPStatus.OK, generate_latest(self.server.registry), content_type=CONTENT_TYPE_LATEST)

    def _answer(self, status: HTTPStatus, body: bytes, challenge: bool = False,
                content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if challenge:
            self.send_header("WWW-Authenticate", REALM)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:   # noqa: A002 (http.server's name)
        """Quiet: refusals are logged through the refusal log, scrapes not at all."""


def _tls_context(tls: ServerTls) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    if tls.client_ca_file is not None:
        context.load_verify_locations(str(tls.client_ca_file))
        context.verify_mode = ssl.CERT_REQUIRED
    return context
