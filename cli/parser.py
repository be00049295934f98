"""The argument parser of every `rmq` command and subcommand: bad arguments are one line (no
usage dump) and exit code 2."""

from __future__ import annotations

import argparse
from typing import TypeAlias

from rmq.broker_server.errors import UserError


class CommandParser(argparse.ArgumentParser):
    """argparse that reports bad arguments as one line (no usage dump) and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UserError(f"{self.prog}: {message}")


# what each command module adds its subcommands to (subparsers of a CommandParser are CommandParsers)
Subcommands: TypeAlias = "argparse._SubParsersAction[CommandParser]"   # not subscriptable at run time
