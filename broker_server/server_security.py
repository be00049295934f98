"""Security of one server process (`rmq broker`, `rmq namesrv`): the `--acl` file with its
reloading, the request-signing interceptor, `--tls-*` credentials for the listening port, and
the credentials of the calls it makes itself (RMQ_* variables, as for the CLI).

Without `--acl` every caller is trusted, so the server should stay on loopback (the default
listen address); it says so at start, and warns when told to listen beyond loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import signal
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc import aio

from rmq.auth import ClientSecurity, open_aio_channel, security_from_environment
from rmq.broker_server.acl import AclError
from rmq.broker_server.acl_file import DEFAULT_POLL_INTERVAL_S, AclFile
from rmq.broker_server.arguments import positive_float
from rmq.broker_server.auth_interceptor import AuthInterceptor
from rmq.broker_server.errors import UserError
from rmq.broker_server.request_auth import DEFAULT_WINDOW_S, RequestAuthenticator
from rmq.broker_server.tls import ServerTls, add_port

log = logging.getLogger("rmq.security")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--acl", metavar="FILE", help="YAML or JSON ACL file: every call must be signed by "
                        "an account in it (reloaded on change and on SIGHUP)")
    parser.add_argument("--signature-window", type=positive_float, default=DEFAULT_WINDOW_S,
                        metavar="SECONDS",
                        help=f"accepted clock difference of signed calls (default {DEFAULT_WINDOW_S})")
    parser.add_argument("--tls-cert", metavar="PEM", help="serve TLS with this certificate (chain)")
    parser.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    parser.add_argument("--tls-client-ca", metavar="PEM",
                        help="mutual TLS: require client certificates signed by this CA")


@dataclass
class ServerSecurity:
    acl_file: AclFile | None = None
    tls: ServerTls | None = None
    signature_window_s: float = DEFAULT_WINDOW_S
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    outgoing: ClientSecurity = field(default_factory=ClientSecurity)   # RMQ_* variables: calls it makes
    _watcher: asyncio.Task | None = field(default=None, repr=False)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ServerSecurity:
        """Load the ACL and check the TLS flags; UserError when either is unusable."""
        tls = ServerTls.from_args(args.tls_cert, args.tls_key, args.tls_client_ca)
        if tls is not None:
            tls.credentials()   # fail now, with the flag named, rather than at bind time
        try:
            acl_file = AclFile(Path(args.acl)) if args.acl else None
        except AclError as error:
            raise UserError(str(error)) from None
        try:
            outgoing = security_from_environment()
        except ValueError as error:
            raise UserError(str(error)) from None
        return cls(acl_file, tls, args.signature_window, outgoing=outgoing)

    def interceptors(self) -> list[aio.ServerInterceptor]:
        if self.acl_file is None:
            return []
        acl_file = self.acl_file
        return [AuthInterceptor(RequestAuthenticator(lambda: acl_file.acl, self.signature_window_s))]

    def open_client_channel(self, address: str) -> grpc.aio.Channel:
        """A channel for the calls this process makes itself (a broker registering with name
        servers): signed and TLS as the RMQ_ACCESS_KEY/RMQ_SECRET_KEY/RMQ_TLS/RMQ_TLS_CA_FILE
        variables say, like the CLI."""
        outgoing = self.outgoing
        return open_aio_channel(address, credentials=outgoing.credentials(), tls=outgoing.tls_settings())

    def add_port(self, server: aio.Server, listen: str) -> int:
        return add_port(server, listen, self.tls)

    def start(self, listen: str) -> None:
        """On the server's running loop: watch the ACL file, reload on SIGHUP, log the posture."""
        if self.acl_file is None:
            if is_loopback(listen):
                log.info("no --acl: every caller is trusted, so listening on loopback %s only (%s)",
                         listen, self.transport)
            else:
                log.warning("no --acl but listening on %s beyond loopback: anyone who reaches this port "
                            "may send, pull and administer topics (%s)", listen, self.transport)
            return
        loop = asyncio.get_running_loop()
        self.acl_file.reload_on_sighup(loop)
        self._watcher = loop.create_task(self.acl_file.watch(self.poll_interval_s))
        log.info("ACL %s in force: %d account(s), signed calls within ±%gs (%s)", self.acl_file.path,
                 len(self.acl_file.acl.accounts), self.signature_window_s, self.transport)

    @property
    def transport(self) -> str:
        if self.tls is None:
            return "plaintext"
        return "TLS with client certificates" if self.tls.client_ca_file else "TLS"

    async def stop(self) -> None:
        if self._watcher is not None:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
            self._watcher = None


def is_loopback(listen: str) -> bool:
    host = listen.rpartition(":")[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
