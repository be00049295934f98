"""Credentials and TLS of the CLI's client commands: flags, else the RMQ_* environment
variables (`rmq.auth.security_from_environment`).

The secret key is read from $RMQ_SECRET_KEY only, never from a flag, so it does not show up
in shell history or `ps` output.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from rmq.auth import (
    ACCESS_KEY_ENV,
    SECRET_KEY_ENV,
    TLS_CA_FILE_ENV,
    TLS_CERT_FILE_ENV,
    TLS_ENV,
    TLS_KEY_FILE_ENV,
    ClientSecurity,
    security_from_environment,
)
from rmq.command_line import UserError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--access-key", metavar="KEY",
                        help=f"sign calls as this account (${ACCESS_KEY_ENV}); the secret key comes "
                             f"from ${SECRET_KEY_ENV}")
    parser.add_argument("--tls", action="store_true", default=None, help=f"connect with TLS (${TLS_ENV}=1)")
    parser.add_argument("--tls-ca-file", metavar="PEM",
                        help=f"CA certificate that signed the servers' certificates (${TLS_CA_FILE_ENV}); "
                             f"implies --tls")
    parser.add_argument("--tls-cert", metavar="PEM",
                        help=f"client certificate for servers that require one (mutual TLS, "
                             f"${TLS_CERT_FILE_ENV}); implies --tls")
    parser.add_argument("--tls-key", metavar="PEM", help=f"private key of --tls-cert (${TLS_KEY_FILE_ENV})")


def client_security(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> ClientSecurity:
    """Flags win over the environment; UserError names the flag or variable at fault."""
    try:
        return security_from_environment(environ, access_key=args.access_key, tls=args.tls,
                                         tls_ca_file=args.tls_ca_file, tls_cert_file=args.tls_cert,
                                         tls_key_file=args.tls_key)
    except ValueError as error:
        raise UserError(str(error)) from None
