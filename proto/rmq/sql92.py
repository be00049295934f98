"""SQL92 property filters (spec consumption-longpolling-offsets §10, "SQL92: evaluated on message
properties"): the expression language RocketMQ documents for `MessageSelector.bySql`, one
definition for the broker (which evaluates it on each candidate message's properties) and the
clients (which validate it at subscribe / `load()` time).

Grammar (keywords case-insensitive):

    expr       := or
    or         := and ("OR" and)*
    and        := not ("AND" not)*
    not        := "NOT" not | predicate
    predicate  := operand [ cmp operand
                          | ["NOT"] "BETWEEN" operand "AND" operand
                          | ["NOT"] "IN" "(" literal ("," literal)* ")"
                          | "IS" ["NOT"] "NULL" ]
    operand    := identifier | literal | TRUE | FALSE | NULL | "(" expr ")"
    literal    := ["-"] number | 'string'
    cmp        := = | <> | != | > | >= | < | <=

A predicate without a comparison is a condition only when its operand is one (TRUE, FALSE, NULL,
a property, a parenthesised condition): `amount > 5 AND 'x'` is a type error. Parentheses nest at
most MAX_NESTING_DEPTH deep and a run of NOTs is counted, not recursed into, so neither parsing nor
evaluation can exhaust Python's recursion limit; the clients and the broker share this one bound.

Semantics: properties are named by identifier (user properties and `TAGS`); an unknown property
is NULL. Logic is SQL's three-valued logic: a comparison with NULL is UNKNOWN, and a message
matches only when the whole expression is TRUE. Property values are strings: they compare
numerically with numbers when they parse as numbers (else the comparison is UNKNOWN), as strings
with string literals; two properties compare numerically when both parse as numbers.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

Value = str | float | bool | None
Properties = Mapping[str, str]
Evaluator = Callable[[Properties], Value]

MAX_EXPRESSION_LENGTH = 4096     # longer ones are refused: a client cannot make the broker compile megabytes
COMPILED_CACHE_SIZE = 1024       # compiled expressions kept per process (bounded: clients choose the strings)
MAX_NESTING_DEPTH = 64           # parentheses nested deeper are refused (five parser frames per level)

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<number>(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?)
  | (?P<string>'(?:[^']|'')*')
  | (?P<ident>[A-Za-z_$][A-Za-z0-9_$.]*)
  | (?P<op><>|!=|>=|<=|=|>|<|\(|\)|,|-)
""", re.VERBOSE)
_KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE"})


class Sql92Error(ValueError):
    """A malformed SQL92 filter: the message names the position (0-based) and what was expected."""

    def __init__(self, expression: str, position: int, problem: str) -> None:
        excerpt = _excerpt(expression, position)
        super().__init__(f"invalid SQL92 filter at position {position}: {problem} in {excerpt}")
        self.position = position


ERROR_EXCERPT_CHARS = 120   # an error quotes at most this much of the expression, around the position


def _excerpt(expression: str, position: int) -> str:
    if len(expression) <= ERROR_EXCERPT_CHARS:
        return repr(expression)
    start = max(0, min(position - ERROR_EXCERPT_CHARS // 2, len(expression) - ERROR_EXCERPT_CHARS))
    window = expression[start:start + ERROR_EXCERPT_CHARS]
    return f"{'…' if start else ''}{window!r}{'…' if start + ERROR_EXCERPT_CHARS < len(expression) else ''}"


@dataclass(frozen=True)
class _Token:
    kind: str        # number, string, ident, keyword, op, end
    text: str
    position: int


def _tokenize(expression: str) -> list[_Token]:
    tokens: list[_Token] = []
    position = 0
    while position < len(expression):
        match = _TOKEN.match(expression, position)
        if match is None:
            if expression[position] == "'":
                raise Sql92Error(expression, position, "unterminated string literal")
            raise Sql92Error(expression, position, f"unexpected character {expression[position]!r}")
        kind, text = match.lastgroup or "", match.group()
        if kind == "ident" and text.upper() in _KEYWORDS:
            kind, text = "keyword", text.upper()
        if kind != "ws":
            tokens.append(_Token(kind, text, position))
        position = match.end()
    tokens.append(_Token("end", "", len(expression)))
    return tokens


# --- values and comparisons -------------------------------------------------------------------

@dataclass(frozen=True)
class _Operand:
    """An operand and what it is: a property (a string at run time), or a typed literal."""

    evaluate: Evaluator
    is_property: bool = False
    constant: Value = None


def _as_number(value: Value) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float):
        return value
    try:
        return float(value)
    except ValueError:
        return None


def _as_bool(value: Value) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def _coerce(left: Value, right: Value, left_is_property: bool, right_is_property: bool
            ) -> tuple[Value, Value] | None:
    """The two values in one comparable type, or None when they cannot be compared (UNKNOWN)."""
    if left is None or right is None:
        return None
    if isinstance(left, bool) or isinstance(right, bool):
        booleans = _as_bool(left), _as_bool(right)
        return None if None in booleans else booleans
    string_literal = ((isinstance(left, str) and not left_is_property)
                      or (isinstance(right, str) and not right_is_property))
    if string_literal:
        return (left, right) if isinstance(left, str) and isinstance(right, str) else None
    numbers = _as_number(left), _as_number(right)
    if numbers[0] is None or numbers[1] is None:
        both_properties = left_is_property and right_is_property
        return (left, right) if both_properties else None
    return numbers


_COMPARATORS: dict[str, Callable[[object, object], bool]] = {
    "=": lambda a, b: a == b, "<>": lambda a, b: a != b, "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,          # type: ignore[operator]
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,          # type: ignore[operator]
}


def _comparison(operator: str, left: _Operand, right: _Operand) -> Evaluator:
    compare = _COMPARATORS[operator]
    ordering = operator not in ("=", "<>", "!=")

    def evaluate(properties: Properties) -> Value:
        pair = _coerce(left.evaluate(properties), right.evaluate(properties),
                       left.is_property, right.is_property)
        if pair is None or (ordering and not all(isinstance(v, float) for v in pair)):
            return None
        return compare(pair[0], pair[1])
    return evaluate


def _negated(evaluate: Evaluator) -> Evaluator:
    def negate(properties: Properties) -> Value:
        value = evaluate(properties)
        return None if value is None else not value
    return negate


def _junction(parts: list[Evaluator], deciding: bool) -> Evaluator:
    """AND (deciding False) or OR (deciding True) in three-valued logic: the deciding value wins,
    else UNKNOWN if any part is unknown, else the other value."""
    def evaluate(properties: Properties) -> Value:
        unknown = False
        for part in parts:
            value = part(properties)
            if value is deciding:
                return deciding
            unknown |= value is None
        return None if unknown else not deciding
    return evaluate


def _conjunction(parts: list[Evaluator]) -> Evaluator:
    return _junction(parts, False)


def _disjunction(parts: list[Evaluator]) -> Evaluator:
    return _junction(parts, True)


def _membership(operand: _Operand, choices: list[_Operand]) -> Evaluator:
    equals = [_comparison("=", operand, choice) for choice in choices]
    return _disjunction(equals)


# --- parser -----------------------------------------------------------------------------------

class _Parser:
    def __init__(self, expression: str) -> None:
        self.expression = expression
        self.tokens = _tokenize(expression)
        self.index = 0
        self.depth = 0      # parentheses open around the current token

    @property
    def token(self) -> _Token:
        return self.tokens[self.index]

    def _fail(self, expected: str) -> Sql92Error:
        found = repr(self.token.text) if self.token.text else "the end"
        return Sql92Error(self.expression, self.token.position, f"expected {expected}, found {found}")

    def _accept(self, kind: str, *texts: str) -> _Token | None:
        token = self.token
        if token.kind == kind and (not texts or token.text in texts):
            self.index += 1
            return token
        return None

    def _expect(self, kind: str, text: str, expected: str) -> None:
        if self._accept(kind, text) is None:
            raise self._fail(expected)

    def parse(self) -> Evaluator:
        if self.token.kind == "end":
            raise self._fail("an expression")
        evaluate = self._or()
        if self.token.kind != "end":
            raise self._fail("AND, OR or the end of the expression")
        return evaluate

    def _or(self) -> Evaluator:
        parts = [self._and()]
        while self._accept("keyword", "OR"):
            parts.append(self._and())
        return parts[0] if len(parts) == 1 else _disjunction(parts)

    def _and(self) -> Evaluator:
        parts = [self._not()]
        while self._accept("keyword", "AND"):
            parts.append(self._not())
        return parts[0] if len(parts) == 1 else _conjunction(parts)

    def _not(self) -> Evaluator:
        """NOT NOT x is x in three-valued logic too: a run of NOTs is counted, not recursed into."""
        negations = 0
        while self._accept("keyword", "NOT"):
            negations += 1
        predicate = self._predicate()
        return _negated(predicate) if negations % 2 else predicate

    def _predicate(self) -> Evaluator:
        start = self.token
        left = self._operand()
        operator = self._accept("op", *_COMPARATORS)
        if operator is not None:
            return _comparison(operator.text, left, self._operand())
        if self._accept("keyword", "IS"):
            negate = self._accept("keyword", "NOT") is not None
            self._expect("keyword", "NULL", "NULL")
            is_null: Evaluator = lambda properties: left.evaluate(properties) is None  # noqa: E731
            return _negated(is_null) if negate else is_null
        negate = self._accept("keyword", "NOT") is not None
        if self._accept("keyword", "BETWEEN"):
            low = self._operand()
            self._expect("keyword", "AND", "AND of BETWEEN … AND …")
            between = _conjunction([_comparison(">=", left, low), _comparison("<=", left, self._operand())])
            return _negated(between) if negate else between
        if self._accept("keyword", "IN"):
            membership = _membership(left, self._literal_list())
            return _negated(membership) if negate else membership
        if negate:
            raise self._fail("BETWEEN or IN after NOT")
        return self._boolean(left, start)

    def _boolean(self, operand: _Operand, start: _Token) -> Evaluator:
        """A bare operand used as a condition: TRUE, FALSE, NULL, a parenthesised condition, or a
        property holding 'true' / 'false'. A number or string literal is no condition."""
        if operand.is_property:
            return _comparison("=", operand, _constant(True))
        if isinstance(operand.constant, str | float):
            previous = self.tokens[self.index - 1]
            literal = self.expression[start.position:previous.position + len(previous.text)]
            raise Sql92Error(self.expression, start.position,
                             f"type error: the literal {literal} is not a condition "
                             "(compare it with something)")
        return operand.evaluate

    def _literal_list(self) -> list[_Operand]:
        self._expect("op", "(", "'(' after IN")
        choices = [self._literal()]
        while self._accept("op", ","):
            choices.append(self._literal())
        self._expect("op", ")", "',' or ')' in the IN list")
        return choices

    def _literal(self) -> _Operand:
        literal = self._signed_literal()
        if literal is None:
            raise self._fail("a string or number literal")
        return literal

    def _signed_literal(self) -> _Operand | None:
        """A string or number literal, a number with a leading minus included; None (nothing
        consumed) when the next token starts none."""
        if self._accept("op", "-"):
            number = self._accept("number")
            if number is None:
                raise self._fail("a number after '-'")
            return _constant(-float(number.text))
        token = self._accept("number") or self._accept("string")
        return None if token is None else _constant(_literal_value(token))

    def _operand(self) -> _Operand:
        literal = self._signed_literal()
        if literal is not None:
            return literal
        token = self.token
        if token.kind == "keyword" and token.text in ("TRUE", "FALSE", "NULL"):
            self.index += 1
            return _constant({"TRUE": True, "FALSE": False, "NULL": None}[token.text])
        if token.kind == "ident":
            self.index += 1
            name = token.text
            return _Operand(lambda properties: properties.get(name), is_property=True)
        if self._accept("op", "("):
            if self.depth == MAX_NESTING_DEPTH:
                raise Sql92Error(self.expression, token.position,
                                 f"parentheses nested deeper than {MAX_NESTING_DEPTH} levels")
            self.depth += 1
            inner = self._or()
            self.depth -= 1
            self._expect("op", ")", "')'")
            return _Operand(inner)
        raise self._fail("a property name, literal or '('")


def _literal_value(token: _Token) -> Value:
    if token.kind == "string":
        return token.text[1:-1].replace("''", "'")
    return float(token.text)


def _constant(value: Value) -> _Operand:
    return _Operand(lambda _properties: value, constant=value)


@dataclass(frozen=True)
class Sql92Filter:
    """A compiled SQL92 filter: `matches(properties)` is True only when the expression is TRUE.
    `cost` (its tokens: each is evaluated at most once per message) measures what one evaluation
    costs, so a caller can bound the CPU a batch of evaluations takes."""

    expression: str
    _evaluate: Evaluator
    cost: int = 1

    def matches(self, properties: Properties) -> bool:
        return self._evaluate(properties) is True


def compile_sql92(expression: str) -> Sql92Filter:
    """Parse and compile an expression (raises Sql92Error naming the position). Compiled filters are
    cached, at most COMPILED_CACHE_SIZE of them."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise Sql92Error(expression, MAX_EXPRESSION_LENGTH,
                         f"longer than {MAX_EXPRESSION_LENGTH} characters")
    return _compile(expression)


@functools.lru_cache(maxsize=COMPILED_CACHE_SIZE)
def _compile(expression: str) -> Sql92Filter:
    parser = _Parser(expression)
    return Sql92Filter(expression, parser.parse(), len(parser.tokens))
