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
from rmq.cli.parser import CommandParser, Subcommands
from rmq.command_line import UserError

SERVER_COMMANDS = ("namesrv", "broker")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser; for a server `command` only the servers' (a broker or name server
    started does not import the client SDK and the console: ~0.2 s less CPU per start)."""
    parser = CommandParser(prog="rmq", description="rmq message broker and clients")
    parser.add_argument("--version", action="version", version=f"rmq {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=CommandParser)
    _add_server_parsers(commands)
    if command not in SERVER_COMMANDS:
        from rmq.cli import client_commands, console_command

        client_commands.add_parsers(commands)
        console_command.add_parser(commands)
    return parser


def _command_word(argv: list[str]) -> str | None:
    """The command `argv` names (its first word that is not an option: `rmq` itself takes none
    with a value)."""
    return next((word for word in argv if not word.startswith("-")), None)


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
        words = sys.argv[1:] if argv is None else argv
        args = build_parser(_command_word(words)).parse_args(words)
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

