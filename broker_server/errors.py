"""Errors the CLI reports as one clear line instead of a traceback: `rmq.command_line.UserError`,
shared by the server and the client commands."""

from rmq.command_line import UserError

__all__ = ["UserError"]
