"""Subscription expressions (RocketMQ FilterAPI.buildSubscriptionData): `*` or `TagA || TagB`,
or an SQL92 condition on message properties (rmq.sql92) chosen with `MessageSelector.by_sql`.

One tag parser, two entry points: clients refuse a malformed expression before sending it
(`parse_sub_expression`), the broker reads whatever a client sent the way RocketMQ does,
skipping empty tags (`tag_codes`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from rmq.message_format import tags_hash_code
from rmq.sql92 import compile_sql92
from rmq.v1 import rmq_pb2

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


class ExpressionType(enum.IntEnum):
    """RocketMQ ExpressionType, valued as on the wire (rmq.v1 ExpressionType)."""

    TAG = rmq_pb2.TAG
    SQL92 = rmq_pb2.SQL92


@dataclass(frozen=True)
class MessageSelector:
    """What a subscription selects (RocketMQ MessageSelector): tags, or an SQL92 condition the
    broker evaluates on each message's properties. Both are checked when built, so a bad
    expression fails at subscribe / query start (ValueError; Sql92Error names the position)."""

    expression: str = SUB_ALL
    expression_type: ExpressionType = ExpressionType.TAG

    @classmethod
    def by_tag(cls, expression: str = SUB_ALL) -> MessageSelector:
        return cls(parse_sub_expression(expression)[0], ExpressionType.TAG)

    @classmethod
    def by_sql(cls, sql: str) -> MessageSelector:
        compile_sql92(sql)
        return cls(sql, ExpressionType.SQL92)

    @property
    def is_sql(self) -> bool:
        return self.expression_type is ExpressionType.SQL92
