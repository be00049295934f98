"""Moved to `rmq.cli.processes`; this alias goes once no test imports it from here."""

from rmq.cli.processes import *  # noqa: F403
