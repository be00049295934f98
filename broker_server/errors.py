"""Errors the CLI reports as one clear line instead of a traceback."""


class UserError(Exception):
    """Bad arguments or input from the user; the message is shown as is."""
