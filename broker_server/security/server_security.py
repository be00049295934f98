"""Security of one server process (`rmq broker`, `rmq namesrv`): the `--acl` file with its
reloading, the request-signing interceptor, `--tls-*` credentials for the listening port, and
the credentials of the calls it makes itself (RMQ_* variables, as for the CLI), and the
limits on connections (grpc_server.server_options).

Without `--acl` every caller is trusted, so the server stays on loopback (the default listen
address): it refuses to listen beyond loopback without an ACL unless `--insecure-listen` says
that is intended.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc import aio

from rmq.auth import ClientSecurity, open_aio_channel, security_from_environment
from rmq.broker_server.background_tasks import cancel_all
from rmq.broker_server.errors import UserError
from rmq.broker_server.offsets.client_id_owners import ClientIdOwners
from rmq.broker_server.security.acl import AclError
from rmq.broker_server.security.acl_file import DEFAULT_POLL_INTERVAL_S, AclFile
from rmq.broker_server.security.auth_interceptor import AuthInterceptor
from rmq.broker_server.security.nonce_cache import DEFAULT_ACCOUNT_CAPACITY
from rmq.broker_server.security.refusal_log import RefusalLog
from rmq.broker_server.security.request_auth import DEFAULT_WINDOW_S, FUTURE_SKEW_MS, RequestAuthenticator
from rmq.broker_server.security.rocketmq_v2_auth import RocketMQv2AuthInterceptor, V2Authenticator
from rmq.broker_server.security.tls import ServerTls, add_port
from rmq.command_line import is_loopback, positive_float, positive_int

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
    parser.add_argument("--nonce-budget", type=positive_int, default=DEFAULT_ACCOUNT_CAPACITY, metavar="N",
                        help=f"nonces remembered per account for replay refusal (default "
                             f"{DEFAULT_ACCOUNT_CAPACITY}); an account signing more calls per window only "
                             f"narrows its own window")
    parser.add_argument("--max-connections", type=positive_int, metavar="N",
                        help="open client connections at most, the gRPC port's and Arrow Flight's "
                             "together (default: half the open-file limit)")
    parser.add_argument("--idle-timeout", type=positive_float, default=DEFAULT_IDLE_TIMEOUT_S,
                        metavar="SECONDS",
                        help=f"close connections without a call in progress for this long "
                             f"(default {DEFAULT_IDLE_TIMEOUT_S:g}; clients reconnect by themselves)")
    parser.add_argument("--insecure-listen", action="store_true",
                        help="allow listening beyond loopback without --acl (every caller is then trusted)")


DEFAULT_IDLE_TIMEOUT_S = 60.0


@dataclass
class ServerSecurity:
    acl_file: AclFile | None = None
    tls: ServerTls | None = None
    signature_window_s: float = DEFAULT_WINDOW_S
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    outgoing: ClientSecurity = field(default_factory=ClientSecurity)   # RMQ_* variables: calls it makes
    nonce_budget: int = DEFAULT_ACCOUNT_CAPACITY
    max_connections: int | None = None   # None: half the open-file limit
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    insecure_listen: bool = False
    refusals: RefusalLog = field(default_factory=RefusalLog)   # shared by the rmq.v1 and RocketMQ 5 checks
    client_ids: ClientIdOwners = field(default_factory=ClientIdOwners)   # rmq.v1 and 4.x remoting calls
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, repr=False)

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
        return cls(acl_file, tls, args.signature_window, outgoing=outgoing, nonce_budget=args.nonce_budget,
                   max_connections=args.max_connections, idle_timeout_s=args.idle_timeout,
                   insecure_listen=args.insecure_listen)

    def check_listen(self, listen: str) -> None:
        """UserError for a listen address beyond loopback without an ACL, unless --insecure-listen."""
        if self.acl_file is None and not self.insecure_listen and not is_loopback(listen):
            raise UserError(f"refusing to listen on {listen} without --acl: anyone who reaches it could "
                            f"send, pull and administer topics. Give --acl FILE, or --insecure-listen if "
                            f"every host that can reach this port is trusted")

    def interceptors(self, server_id: str) -> list[aio.ServerInterceptor]:
        """The ACL interceptor for a server whose calls are signed for `server_id`
        (rmq.request_signing: broker_server_id / name_server_id)."""
        if self.acl_file is None:
            return []
        acl_file = self.acl_file
        # the RocketMQ 5 check first: rmq.v1's AuthInterceptor passes v2 calls on to it
        client_ids = self.client_ids   # one owner per client id, whichever protocol it speaks
        authenticator = self.request_authenticator(server_id, client_ids)
        assert authenticator is not None
        return [RocketMQv2AuthInterceptor(V2Authenticator(lambda: acl_file.acl, client_ids), self.refusals),
                AuthInterceptor(authenticator, self.refusals)]

    def request_authenticator(self, server_id: str, client_ids: ClientIdOwners | None = None
                              ) -> RequestAuthenticator | None:
        """The rmq request-signing check for calls to `server_id` (None without an ACL): one per
        listener (the gRPC port, the Flight data plane), each with its own nonce window;
        `client_ids` binds the client ids calls name to their accounts (the gRPC port)."""
        if self.acl_file is None:
            return None
        acl_file = self.acl_file
        return RequestAuthenticator(lambda: acl_file.acl, server_id, self.signature_window_s,
                                    self.nonce_budget, client_ids=client_ids)

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
                log.warning("no --acl but listening on %s beyond loopback (--insecure-listen): anyone who "
                            "reaches this port may send, pull and administer topics (%s)", listen,
                            self.transport)
            return
        loop = asyncio.get_running_loop()
        self.acl_file.reload_on_sighup(loop)
        self._tasks = [loop.create_task(self.acl_file.watch(self.poll_interval_s)),
                       loop.create_task(self.refusals.summarize_forever())]
        log.info("ACL %s in force: %d account(s), signed calls within -%gs/+%gs, %d nonces per account (%s)",
                 self.acl_file.path, len(self.acl_file.acl.accounts), self.signature_window_s,
                 FUTURE_SKEW_MS / 1000, self.nonce_budget, self.transport)

    @property
    def transport(self) -> str:
        if self.tls is None:
            return "plaintext"
        return "TLS with client certificates" if self.tls.client_ca_file else "TLS"

    async def stop(self) -> None:
        if self._tasks:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        await cancel_all(self._tasks)


