"""Subscription expressions: `*` or `TagA || TagB` (RocketMQ FilterAPI)."""

from __future__ import annotations

import pytest

from rmq.sql92 import Sql92Error
from rmq.subscription import MessageSelector, parse_sub_expression


def test_star_matches_every_tag() -> None:
    assert parse_sub_expression("*") == ("*", None)
    assert parse_sub_expression(" * ") == ("*", None)


def test_tags_are_trimmed_and_normalised() -> None:
    expression, tags = parse_sub_expression("TagA||TagB ||  标签")
    assert (expression, tags) == ("TagA || TagB || 标签", frozenset({"TagA", "TagB", "标签"}))
    assert parse_sub_expression("TagA") == ("TagA", frozenset({"TagA"}))


@pytest.mark.parametrize("text", ["", "  ", "A ||", "|| A", "A || * ", "A |||| B"])
def test_empty_tags_or_a_mixed_star_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid subscription expression"):
        parse_sub_expression(text)


def test_sql_selector_of_the_sdk_refuses_deep_nesting_with_the_position() -> None:
    """Issue #32 item 7: MessageSelector.by_sql (PushConsumer / PullConsumer subscribe) raised
    RecursionError at 200 nested parentheses."""
    with pytest.raises(Sql92Error, match="at position 64: parentheses nested deeper than 64 levels"):
        MessageSelector.by_sql("(" * 200 + "a = 1" + ")" * 200)
    assert MessageSelector.by_sql("amount > -5").is_sql
