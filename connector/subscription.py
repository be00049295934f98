"""Subscription expressions (RocketMQ FilterAPI.buildSubscriptionData): `*` or `TagA || TagB`."""

from __future__ import annotations

SUB_ALL = "*"
FORMAT_HINT = "'*' or tags separated by '||', e.g. 'TagA || TagB'"


def parse_sub_expression(text: str) -> tuple[str, frozenset[str] | None]:
    """The normalised expression and its tag set (None: every tag). Raises ValueError for
    an empty tag or a `*` mixed with tags."""
    if text.strip() == SUB_ALL:
        return SUB_ALL, None
    tags = [part.strip() for part in text.split("||")]
    if any(not tag or tag == SUB_ALL for tag in tags):
        raise ValueError(f"invalid subscription expression {text!r}: expected {FORMAT_HINT}")
    return " || ".join(tags), frozenset(tags)
