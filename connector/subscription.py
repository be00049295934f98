"""Subscription expressions for clients: the strict entry point of `rmq.subscription`."""

from rmq.subscription import FORMAT_HINT, SUB_ALL, parse_sub_expression

__all__ = ["FORMAT_HINT", "SUB_ALL", "parse_sub_expression"]
