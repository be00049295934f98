"""`rmq`: one command line for the servers (`namesrv`, `broker`) and the client commands
(`topic`, `produce`, `consume`, `group`, `dlq`). User errors print one line and exit non-zero;
a reader of stdout that goes away (`| head`) ends the command quietly."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

# gRPC core logs bind failures and the like to stderr itself; the CLI reports them as one
# clear line instead. Set GRPC_VERBOSITY=debug to see gRPC's own logs.
os.environ.setdefault("GRPC_VERBOSITY", "NONE")

from rmq import __version__
from rmq.cli import client_commands, console_command
from rmq.cli.parser import CommandParser, Subcommands
from rmq.command_line import UserError


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="rmq", description="rmq message broker and clients")
    parser.add_argument("--version", action="version", version=f"rmq {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    _add_server_parsers(commands)
    client_commands.add_parsers(commands)
    console_command.add_parser(commands)
    return parser


def _add_server_parsers(commands: Subcommands) -> None:
    """`rmq namesrv|broker`; without the `broker` extra installed they say what to install."""
    try:
        from rmq.cli import server_commands
    except ModuleNotFoundError as missing:
        for name in ("namesrv", "broker"):
            parser = commands.add_parser(name, help=f"run a {name} (needs: pip install 'rmq[broker]')",
                                         prefix_chars="\0", add_help=False)   # takes any argument
            parser.add_argument("arguments", nargs="*")
            parser.set_defaults(handler=_needs_broker_extra(name, missing.name or "a module"))
        return
    server_commands.add_parsers(commands)


def _needs_broker_extra(command: str, module: str) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        raise UserError(f"rmq {command} needs {module}: pip install 'rmq[broker]'")

    return handler


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

