"""`rmq`: one command line for the servers (`namesrv`, `broker`) and the client commands
(`topic`, `produce`, `consume`, `group`, `dlq`). User errors print one line and exit non-zero;
a reader of stdout that goes away (`| head`) ends the command quietly."""

from __future__ import annotations

import argparse
import os
import sys
from importlib.metadata import version

# gRPC core logs bind failures and the like to stderr itself; the CLI reports them as one
# clear line instead. Set GRPC_VERBOSITY=debug to see gRPC's own logs.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from rmq.broker_server.errors import UserError
from rmq.cli import client_commands, console_command, server_commands
from rmq.cli.parser import CommandParser


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="rmq", description="rmq message broker and clients")
    parser.add_argument("--version", action="version", version=f"rmq {version('rmq')}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    server_commands.add_parsers(commands)
    client_commands.add_parsers(commands)
    console_command.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        code = int(args.handler(args) or 0)
        sys.stdout.flush()   # a reader gone away shows here, not in the interpreter's last flush
        return code
    except UserError as error:
        print(f"rmq: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader of stdout went away (`| head`): what it wanted is printed; nothing more to say
        # (stdout goes to /dev/null so the interpreter's final flush does not fail again)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

