"""`rmq console --endpoints ... [--listen 127.0.0.1:8780]`: serve the web console (rmq.cli.console)
until interrupted. Its own identity (--access-key / $RMQ_SECRET_KEY) samples the charts only;
visitors who did not sign in call the cluster unsigned (with the TLS flags). Requests naming
another Host than the --listen address (or localhost, or a --host name) are refused."""

from __future__ import annotations

import argparse
import os

from rmq.cli import client_security
from rmq.cli.parser import Subcommands
from rmq.command_line import UserError, is_loopback

DEFAULT_LISTEN = "127.0.0.1:8780"    # not 8080: the Spark standalone master's web UI (compose publishes it)
ENDPOINTS_ENV = "RMQ_ENDPOINTS"
DEFAULT_ENDPOINTS = "127.0.0.1:10911"


def add_parser(commands: Subcommands) -> None:
    parser = commands.add_parser("console",
                                 help="web console: cluster, topics, groups, messages, DLQ, charts")
    parser.add_argument("--endpoints", default=os.environ.get(ENDPOINTS_ENV, DEFAULT_ENDPOINTS),
                        metavar="HOST:PORT[,...]", help="name server(s) or broker(s)")
    parser.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                        help=f"address of the web console (default {DEFAULT_LISTEN})")
    parser.add_argument("--insecure-listen", action="store_true",
                        help="allow a non-loopback --listen: anyone who reaches it acts as the "
                             "console's account until they sign in")
    parser.add_argument("--host", action="append", default=[], metavar="NAME", dest="hosts",
                        help="a name browsers reach the console by (its Host header), besides the --listen "
                             "address and, on loopback, localhost; other names are refused (DNS rebinding)")
    parser.add_argument("--chart-interval", type=float, default=10.0, metavar="SECONDS",
                        help="how often the charts sample the cluster (default 10)")
    client_security.add_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from rmq.cli.console import ConsoleSettings, History, create_app
        from rmq.cli.console.app import LOOPBACK_HOSTS
        from rmq.cli.console.cluster_view import ClusterView
        from rmq.connector.client import RmqClient
    except ImportError as missing:
        raise UserError(f"rmq console needs {missing.name}: pip install 'rmq[console]'") from None
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"--listen {args.listen}: expected HOST:PORT")
    if not is_loopback(args.listen) and not args.insecure_listen:
        raise UserError(f"--listen {args.listen} is not a loopback address: add --insecure-listen to "
                        "serve the console beyond this machine")
    if args.chart_interval <= 0:
        raise UserError("--chart-interval must be positive")
    listen_host = host.strip("[]")
    names = (*LOOPBACK_HOSTS, listen_host) if is_loopback(args.listen) else (listen_host,)
    settings = ConsoleSettings(args.endpoints, client_security.client_security(args),
                               tuple(dict.fromkeys([*names, *args.hosts])))
    sampler = RmqClient(args.endpoints, **settings.security.client_kwargs())
    history = History(ClusterView(sampler).sample, args.chart_interval)
    history.start()
    print(f"rmq console on http://{args.listen}/ (cluster {args.endpoints})", flush=True)
    try:
        uvicorn.run(create_app(settings, history), host=listen_host, port=int(port), log_level="warning")
    finally:
        history.stop()
        sampler.close()
    return 0
