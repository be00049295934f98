"""Subscription expressions: `*` or `TagA || TagB` (RocketMQ FilterAPI)."""

from __future__ import annotations

import pytest

from rmq.subscription import parse_sub_expression


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
