"""SQL92 property filters (rmq.sql92): each operator, precedence, NULL rules, numeric vs string
comparison, and errors naming the position."""

import pytest

from rmq.sql92 import (
    COMPILED_CACHE_SIZE,
    MAX_EXPRESSION_LENGTH,
    MAX_NESTING_DEPTH,
    Sql92Error,
    _compile,
    compile_sql92,
)

ORDER = {"region": "eu", "amount": "150", "TAGS": "TagA", "vip": "true", "code": "007", "note": "it's"}


def matches(expression: str, properties: dict[str, str] = ORDER) -> bool:
    return compile_sql92(expression).matches(properties)


@pytest.mark.parametrize(("expression", "expected"), [
    ("amount > 100", True), ("amount > 150", False), ("amount >= 150", True), ("amount < 150", False),
    ("amount <= 150", True), ("amount = 150", True), ("amount = 150.0", True), ("amount <> 150", False),
    ("amount != 151", True), ("amount > 1e2", True), ("amount > .5", True),
    ("region = 'eu'", True), ("region <> 'eu'", False), ("region = 'EU'", False),
    ("note = 'it''s'", True),
    ("amount BETWEEN 100 AND 200", True), ("amount BETWEEN 151 AND 200", False),
    ("amount NOT BETWEEN 151 AND 200", True), ("amount BETWEEN 150 AND 150", True),
    ("region IN ('us', 'eu')", True), ("region IN ('us', 'apac')", False), ("region NOT IN ('us')", True),
    ("amount IN (1, 150)", True), ("TAGS IN ('TagA', 'TagB')", True), ("TAGS = 'TagB'", False),
    ("missing IS NULL", True), ("region IS NULL", False), ("region IS NOT NULL", True),
    ("TRUE", True), ("FALSE", False), ("vip", True), ("vip = TRUE", True), ("NOT vip", False),
    ("region = 'eu' AND amount > 100", True), ("region = 'us' OR amount > 100", True),
    ("NOT region = 'us'", True), ("NOT (region = 'eu' AND amount > 100)", False),
])
def test_operators(expression: str, expected: bool) -> None:
    assert matches(expression) is expected


def test_and_binds_tighter_than_or() -> None:
    assert matches("region = 'us' AND amount > 1000 OR amount = 150")        # (F AND F) OR T
    assert not matches("region = 'us' AND (amount > 1000 OR amount = 150)")   # F AND (F OR T)
    assert matches("NOT region = 'us' AND amount = 150")                      # (NOT F) AND T


def test_keywords_are_case_insensitive() -> None:
    assert matches("region = 'eu' and amount between 100 and 200 and region in ('eu') and x is null")


@pytest.mark.parametrize("expression", [
    "missing = 1", "missing > 1", "missing <> 1", "missing = 'x'", "NOT missing = 1",
    "missing BETWEEN 1 AND 2",
    "missing NOT BETWEEN 1 AND 2", "missing IN ('a')", "missing NOT IN ('a')", "NULL = NULL",
])
def test_comparisons_with_null_never_match(expression: str) -> None:
    assert not matches(expression)


def test_three_valued_logic() -> None:
    assert matches("missing = 1 OR amount = 150")        # UNKNOWN OR TRUE
    assert not matches("missing = 1 AND amount = 150")   # UNKNOWN AND TRUE
    assert not matches("missing = 1 OR amount = 1")      # UNKNOWN OR FALSE
    assert not matches("missing = 1 AND amount = 1")     # FALSE wins, still no match


def test_numbers_compare_numerically_only_when_both_parse() -> None:
    assert matches("code = 7")                   # '007' parses as a number
    assert not matches("code = '7'")             # against a string literal: string equality
    assert matches("code = '007'")
    assert not matches("region > 1")              # 'eu' is not a number: UNKNOWN
    assert not matches("region < 'zz'")           # ordering is numeric only
    assert matches("amount > code", ORDER)        # two numeric properties: 150 > 7
    assert not matches("amount > region")
    assert matches("a = b", {"a": "x", "b": "x"})    # two non-numeric properties: string equality


@pytest.mark.parametrize(("expression", "position", "expected"), [
    ("amount >", 8, "expected a property name, literal or '(', found the end"),
    ("region = 'eu", 9, "unterminated string literal"),
    ("amount BETWEEN 1", 16, "expected AND of BETWEEN"),
    ("amount BETWEEN 1 OR 2", 17, "expected AND of BETWEEN"),
    ("region IN ('a'", 14, "expected ',' or ')' in the IN list"),
    ("region IN (amount)", 11, "expected a string or number literal, found 'amount'"),
    ("region IN 'a'", 10, "expected '(' after IN"),
    ("", 0, "expected an expression"),
    ("amount = 1 region", 11, "expected AND, OR or the end of the expression, found 'region'"),
    ("amount # 1", 7, "unexpected character '#'"),
    ("amount IS 5", 10, "expected NULL, found '5'"),
    ("amount NOT 5", 11, "expected BETWEEN or IN after NOT"),
    ("(amount > 1", 11, "expected ')'"),
])
def test_errors_name_the_position(expression: str, position: int, expected: str) -> None:
    with pytest.raises(Sql92Error, match=f"at position {position}: ") as error:
        compile_sql92(expression)
    assert expected in str(error.value)
    assert error.value.position == position


def test_expression_length_and_cache_are_bounded() -> None:
    with pytest.raises(Sql92Error, match=f"longer than {MAX_EXPRESSION_LENGTH}"):
        compile_sql92("a = 1 OR " * 1000 + "a = 1")
    for n in range(COMPILED_CACHE_SIZE + 500):
        compile_sql92(f"amount = {n}")
    assert _compile.cache_info().currsize <= COMPILED_CACHE_SIZE


def test_nesting_past_the_depth_limit_is_an_error_at_the_parenthesis() -> None:
    """Issue #32 item 7 / #25 item 6: 200 nested parentheses raised RecursionError in every client."""
    assert matches("(" * MAX_NESTING_DEPTH + "amount = 150" + ")" * MAX_NESTING_DEPTH)
    too_deep = "(" * (MAX_NESTING_DEPTH + 1) + "amount = 150" + ")" * (MAX_NESTING_DEPTH + 1)
    for expression in (too_deep, "(" * 200 + "amount = 150" + ")" * 200):
        with pytest.raises(Sql92Error, match=f"at position {MAX_NESTING_DEPTH}: parentheses nested deeper"):
            compile_sql92(expression)


def test_a_run_of_nots_is_counted_not_recursed() -> None:
    assert matches("NOT " * 1000 + "amount = 150")
    assert not matches("NOT " * 1001 + "amount = 150")
    assert not matches("NOT " * 1001 + "missing = 1")     # NOT UNKNOWN is UNKNOWN


@pytest.mark.parametrize(("expression", "position", "literal"), [
    ("amount > 5 AND 'x'", 15, "'x'"), ("'x' OR amount > 5", 0, "'x'"), ("5", 0, "5"),
    ("NOT -5", 4, "-5"), ("amount > 5 AND (7)", 16, "7"),
])
def test_a_literal_is_no_condition(expression: str, position: int, literal: str) -> None:
    with pytest.raises(Sql92Error, match=f"at position {position}: type error: the literal {literal} is not"):
        compile_sql92(expression)


@pytest.mark.parametrize(("expression", "expected"), [
    ("amount > -5", True), ("amount < -5", False), ("debt = -12.5", True), ("debt < -1e1", True),
    ("debt BETWEEN -20 AND -10", True), ("debt IN (-12.5, 3)", True), ("amount>-5", True),
])
def test_negative_literals(expression: str, expected: bool) -> None:
    assert matches(expression, {**ORDER, "debt": "-12.5"}) is expected


def test_a_minus_needs_a_number() -> None:
    with pytest.raises(Sql92Error, match="at position 10: expected a number after '-', found 'amount'"):
        compile_sql92("amount > -amount")
