"""Subscription expressions (RocketMQ FilterAPI.buildSubscriptionData): `*` or `TagA || TagB`.

One parser, two entry points: clients refuse a malformed expression before sending it
(`parse_sub_expression`), the broker reads whatever a client sent the way RocketMQ does,
skipping empty tags (`tag_codes`)."""

from __future__ import annotations

from rmq.message_format import tags_hash_code

SUB_ALL = "*"
SEPARATOR = "||"
FORMAT_HINT = "'*' or tags separated by '||', e.g. 'TagA || TagB'"


def _tags(text: str) -> list[str]:
    return [part.strip() for part in text.split(SEPARATOR)]


def parse_sub_expression(text: str) -> tuple[str, frozenset[str] | None]:
    """Strict (clients): the normalised expression and its tag set (None: every tag). Raises
    ValueError for an empty tag or a `*` mixed with tags."""
    if text.strip() == SUB_ALL:
        return SUB_ALL, None
    tags = _tags(text)
    if any(not tag or tag == SUB_ALL for tag in tags):
        raise ValueError(f"invalid subscription expression {text!r}: expected {FORMAT_HINT}")
    return " || ".join(tags), frozenset(tags)


def tag_codes(text: str) -> frozenset[int] | None:
    """Lenient (the broker): the tag hash codes an expression selects, empty tags skipped;
    None (every message) for `*`, an empty expression or one that names `*` among its tags."""
    tags = set(_tags(text)) - {""}
    if not tags or SUB_ALL in tags:
        return None
    return frozenset(tags_hash_code(tag) for tag in tags)
