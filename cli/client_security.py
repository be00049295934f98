"""Credentials and TLS for the CLI's client commands (flags, else environment variables), and
for the broker's own calls to name servers (environment variables).

The secret key is read from $RMQ_SECRET_KEY only, never from a flag, so it does not show up
in shell history or `ps` output.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from rmq.broker_server.errors import UserError
from rmq.connector.auth import ClientSecurity

ACCESS_KEY_ENV = "RMQ_ACCESS_KEY"
SECRET_KEY_ENV = "RMQ_SECRET_KEY"
TLS_ENV = "RMQ_TLS"
TLS_CA_FILE_ENV = "RMQ_TLS_CA_FILE"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"", "0", "false", "no", "off"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--access-key", metavar="KEY",
                        help=f"sign calls as this account (${ACCESS_KEY_ENV}); the secret key comes "
                             f"from ${SECRET_KEY_ENV}")
    parser.add_argument("--tls", action="store_true", default=None, help=f"connect with TLS (${TLS_ENV}=1)")
    parser.add_argument("--tls-ca-file", metavar="PEM",
                        help=f"CA certificate that signed the servers' certificates (${TLS_CA_FILE_ENV}); "
                             f"implies --tls")


def client_security(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> ClientSecurity:
    """Flags win over the environment; UserError names the flag or variable at fault."""
    access_key = args.access_key or environ.get(ACCESS_KEY_ENV) or None
    secret_key = environ.get(SECRET_KEY_ENV) or None
    if access_key and not secret_key:
        raise UserError(f"an access key is given but ${SECRET_KEY_ENV} is not set (the secret key is read "
                        f"from the environment only)")
    if secret_key and not access_key:
        raise UserError(f"${SECRET_KEY_ENV} is set but no access key: give --access-key or ${ACCESS_KEY_ENV}")
    ca_file = args.tls_ca_file or environ.get(TLS_CA_FILE_ENV) or None
    tls = args.tls if args.tls is not None else _env_flag(environ, TLS_ENV)
    if ca_file is not None:
        if not os.path.isfile(ca_file):
            raise UserError(f"TLS CA file {ca_file} does not exist")
        tls = True
    return ClientSecurity(access_key, secret_key, tls, ca_file)


def environment_security(environ: Mapping[str, str] = os.environ) -> ClientSecurity:
    """The RMQ_* variables alone: what the broker uses for its calls to name servers."""
    return client_security(argparse.Namespace(access_key=None, tls=None, tls_ca_file=None), environ)


def _env_flag(environ: Mapping[str, str], name: str) -> bool:
    value = environ.get(name, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise UserError(f"${name} must be 1/true/yes or 0/false/no, not {value!r}")
