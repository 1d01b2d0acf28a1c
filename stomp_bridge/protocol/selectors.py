"""JMS / SQL-92 message selectors over STOMP message headers (Apollo's and Artemis' ``selector``).

``compile_selector(text)`` parses once, at SUBSCRIBE, into a closure
``match(headers) -> bool``; a malformed selector raises :class:`SelectorError`
there, so a bad selector is an ERROR at SUBSCRIBE and never a failure at
delivery time.

The grammar is JMS 2.0 §3.8.1 (the subset Apollo and Artemis accept)::

    or      := and ( OR and )*
    and     := not ( AND not )*
    not     := NOT not | cmp
    cmp     := sum [ (= | <> | < | <= | > | >=) sum
                   | [NOT] BETWEEN sum AND sum
                   | [NOT] IN ( string {, string} )
                   | [NOT] LIKE string [ESCAPE string]
                   | IS [NOT] NULL ]
    sum     := product ( (+ | -) product )*
    product := unary ( (* | /) unary )*
    unary   := (+ | -) unary | primary
    primary := literal | identifier | "quoted identifier" | ( or )

Evaluation follows JMS three-valued logic: a missing header is NULL, any
comparison or arithmetic with NULL is *unknown*, ``AND``/``OR``/``NOT`` use the
SQL truth tables, and only a *true* result selects the message. STOMP header
values are strings, so a string compared or added to a number is read as a
number first (``weight > 2500`` works on ``weight:3000``, as on Apollo); a
string that is not a number makes the comparison unknown. Strings and booleans
only support ``=`` and ``<>`` (JMS). ``JMSPriority``, ``JMSType``,
``JMSCorrelationID``, ``JMSMessageID``, ``JMSTimestamp``, ``JMSDeliveryMode``
and ``JMSExpiration`` read the matching STOMP headers. Header names that are not
identifiers (``content-type``) can be written in double quotes (ActiveMQ).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from stomp_bridge.protocol.errors import FrameRejected

Headers = Mapping[str, str]
Value = Any  # str | int | float | bool | None
Expr = Callable[[Headers], Value]

MAX_DEPTH = 64  # nesting of parentheses and NOTs; deeper is refused, not a RecursionError


class SelectorError(FrameRejected):
    """A selector that does not parse; the SUBSCRIBE that carried it gets this ERROR."""

    def __init__(self, selector: str, reason: str) -> None:
        super().__init__(
            "Invalid selector",
            f"The selector {selector!r} is not a valid JMS/SQL-92 selector: {reason}.\n",
        )


# -- tokenizer --------------------------------------------------------------------------------

KEYWORDS = frozenset(("AND", "OR", "NOT", "BETWEEN", "IN", "LIKE", "ESCAPE", "IS", "NULL", "TRUE", "FALSE"))

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>'(?:[^']|'')*')
    | (?P<quoted>"(?:[^"]|"")*")
    | (?P<number>0[xX][0-9a-fA-F]+[lL]?
        | (?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?
        | [0-9]+[eE][+-]?[0-9]+[fFdD]?
        | [0-9]+[lL]?)
    | (?P<ident>[A-Za-z_$][A-Za-z0-9_$.]*)
    | (?P<op><>|<=|>=|[=<>+\-*/(),])
    )""",
    re.VERBOSE,
)


def tokenize(text: str) -> list[tuple[str, Any]]:
    """(kind, value) pairs: ``str``/``num``/``id``/``kw``/``op``, then ``("end", None)``."""
    tokens: list[tuple[str, Any]] = []
    pos, end = 0, len(text)
    while True:
        while pos < end and text[pos].isspace():
            pos += 1
        if pos == end:
            tokens.append(("end", None))
            return tokens
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise SelectorError(text, f"unexpected character {text[pos]!r} at position {pos}")
        pos = m.end()
        kind = m.lastgroup
        raw = m.group(kind)
        if kind == "string":
            tokens.append(("str", raw[1:-1].replace("''", "'")))
        elif kind == "quoted":
            tokens.append(("id", raw[1:-1].replace('""', '"')))
        elif kind == "number":
            tokens.append(("num", _number(raw)))
        elif kind == "ident":
            upper = raw.upper()
            tokens.append(("kw", upper) if upper in KEYWORDS else ("id", raw))
        else:
            tokens.append(("op", raw))


def _number(raw: str) -> int | float:
    if raw[:2] in ("0x", "0X"):
        return int(raw[2:].rstrip("lL"), 16)
    if raw[-1] in "lL":
        return int(raw[:-1])
    if any(c in raw for c in ".eEfFdD"):
        return float(raw.rstrip("fFdD"))
    return int(raw)


# -- value rules ------------------------------------------------------------------------------


def _as_number(value: Value) -> int | float | None:
    kind = type(value)
    if kind is int or kind is float:
        return value
    if kind is str:
        try:
            return int(value)
        except ValueError:
            try:
                return float(value)
            except ValueError:
                return None
    return None


def _as_bool(value: Value) -> bool | None:
    if value is True or value is False:
        return value
    if type(value) is str:
        lower = value.lower()
        if lower == "true":
            return True
        if lower == "false":
            return False
    return None


def _operands(a: Value, b: Value) -> tuple[Value, Value] | None:
    """Both sides in one comparable type, or None (unknown)."""
    if a is None or b is None:
        return None
    ta, tb = type(a), type(b)
    if ta is bool or tb is bool:
        a2, b2 = _as_bool(a), _as_bool(b)
        return None if a2 is None or b2 is None else (a2, b2)
    if ta is str and tb is str:
        return a, b
    a3, b3 = _as_number(a), _as_number(b)
    return None if a3 is None or b3 is None else (a3, b3)


def _equal(a: Value, b: Value) -> bool | None:
    if type(a) is str and type(b) is str:  # the usual header = 'literal'
        return a == b
    pair = _operands(a, b)
    return None if pair is None else pair[0] == pair[1]


def _ordered(op: Callable[[Any, Any], bool]) -> Callable[[Value, Value], bool | None]:
    def compare(a: Value, b: Value) -> bool | None:
        if type(b) is int and type(a) is str:  # the usual header > 2500
            try:
                return op(int(a), b)
            except ValueError:
                pass
        pair = _operands(a, b)
        if pair is None or type(pair[0]) is str or type(pair[0]) is bool:
            return None  # JMS: strings and booleans only support = and <>
        return op(pair[0], pair[1])

    return compare


_COMPARE: dict[str, Callable[[Value, Value], bool | None]] = {
    "=": _equal,
    "<>": lambda a, b: None if (r := _equal(a, b)) is None else not r,
    "<": _ordered(lambda a, b: a < b),
    "<=": _ordered(lambda a, b: a <= b),
    ">": _ordered(lambda a, b: a > b),
    ">=": _ordered(lambda a, b: a >= b),
}


def _arith(op: str) -> Callable[[Value, Value], Value]:
    def apply(a: Value, b: Value) -> Value:
        x, y = _as_number(a), _as_number(b)
        if x is None or y is None or type(a) is bool or type(b) is bool:
            return None
        if op == "+":
            return x + y
        if op == "-":
            return x - y
        if op == "*":
            return x * y
        if y == 0:
            return None
        if type(x) is int and type(y) is int:
            return int(x / y)  # Java integer division truncates toward zero
        return x / y

    return apply


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def _not(a: bool | None) -> bool | None:
    return None if a is None else not a


# JMS header fields, read from the STOMP headers the bridge puts on MESSAGE.
def _delivery_mode(headers: Headers) -> Value:
    return "PERSISTENT" if headers.get("persistent") == "true" else "NON_PERSISTENT"


_JMS_FIELDS: dict[str, Expr] = {
    "JMSPriority": lambda h: h.get("priority", "4"),
    "JMSType": lambda h: h.get("type"),
    "JMSCorrelationID": lambda h: h.get("correlation-id"),
    "JMSMessageID": lambda h: h.get("amqp-message-id", h.get("message-id")),
    "JMSTimestamp": lambda h: h.get("timestamp"),
    "JMSExpiration": lambda h: h.get("expires", "0"),
    "JMSDeliveryMode": _delivery_mode,
}


def like_regex(pattern: str, escape: str | None) -> re.Pattern[str]:
    """``%`` any run, ``_`` one character, ``escape`` makes the next one literal."""
    out = []
    chars = iter(pattern)
    for ch in chars:
        if escape is not None and ch == escape:
            nxt = next(chars, None)
            if nxt is None:
                raise ValueError("pattern ends with the escape character")
            out.append(re.escape(nxt))
        elif ch == "%":
            out.append(".*")
        elif ch == "_":
            out.append(".")
        else:
            out.append(re.escape(ch))
    return re.compile("".join(out), re.DOTALL)


# -- parser -----------------------------------------------------------------------------------


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.pos = 0
        self.depth = 0

    def error(self, reason: str) -> SelectorError:
        return SelectorError(self.text, reason)

    def peek(self) -> tuple[str, Any]:
        return self.tokens[self.pos]

    def take(self) -> tuple[str, Any]:
        token = self.tokens[self.pos]
        self.pos += 1
        return token

    def accept(self, kind: str, value: Any) -> bool:
        if self.tokens[self.pos] == (kind, value):
            self.pos += 1
            return True
        return False

    def expect(self, kind: str, value: Any, what: str) -> None:
        if not self.accept(kind, value):
            raise self.error(f"expected {what}, found {_describe(self.peek())}")

    def nest(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"nested deeper than {MAX_DEPTH} levels")

    def parse(self) -> Expr:
        expr = self.or_()
        if self.peek()[0] != "end":
            raise self.error(f"unexpected {_describe(self.peek())}")
        return expr

    def or_(self) -> Expr:
        left = self.and_()
        while self.accept("kw", "OR"):
            right = self.and_()
            left = (lambda a, b: lambda h: _or(_truth(a(h)), _truth(b(h))))(left, right)
        return left

    def and_(self) -> Expr:
        left = self.not_()
        while self.accept("kw", "AND"):
            right = self.not_()
            left = (lambda a, b: lambda h: _and(_truth(a(h)), _truth(b(h))))(left, right)
        return left

    def not_(self) -> Expr:
        if self.accept("kw", "NOT"):
            self.nest()
            inner = self.not_()
            self.depth -= 1
            return lambda h: _not(_truth(inner(h)))
        return self.comparison()

    def comparison(self) -> Expr:
        left = self.sum_()
        kind, value = self.peek()
        if kind == "op" and value in _COMPARE:
            self.take()
            right = self.sum_()
            compare = _COMPARE[value]
            return lambda h: compare(left(h), right(h))
        negate = False
        if (kind, value) == ("kw", "NOT"):
            following = self.tokens[self.pos + 1]
            if following[0] == "kw" and following[1] in ("BETWEEN", "IN", "LIKE"):
                self.take()
                negate = True
                kind, value = self.peek()
        if kind != "kw":
            if negate:
                raise self.error("expected BETWEEN, IN or LIKE after NOT")
            return left
        if value == "BETWEEN":
            self.take()
            low = self.sum_()
            self.expect("kw", "AND", "AND in BETWEEN")
            high = self.sum_()
            ge, le = _COMPARE[">="], _COMPARE["<="]
            expr: Expr = lambda h: _and(ge(v := left(h), low(h)), le(v, high(h)))  # noqa: E731
        elif value == "IN":
            self.take()
            expr = self.in_list(left)
        elif value == "LIKE":
            self.take()
            expr = self.like(left)
        elif value == "IS" and not negate:
            self.take()
            is_not = self.accept("kw", "NOT")
            self.expect("kw", "NULL", "NULL after IS")
            return (lambda h: left(h) is not None) if is_not else (lambda h: left(h) is None)
        else:
            if negate:
                raise self.error("expected BETWEEN, IN or LIKE after NOT")
            return left
        if negate:
            positive = expr
            return lambda h: _not(positive(h))
        return expr

    def string_literal(self, what: str) -> str:
        kind, value = self.take()
        if kind != "str":
            raise self.error(f"{what} must be a string literal, found {_describe((kind, value))}")
        return value

    def in_list(self, left: Expr) -> Expr:
        self.expect("op", "(", "( after IN")
        values = {self.string_literal("an IN list entry")}
        while self.accept("op", ","):
            values.add(self.string_literal("an IN list entry"))
        self.expect("op", ")", ") to close the IN list")
        frozen = frozenset(values)

        def member(h: Headers) -> bool | None:
            v = left(h)
            if v is None:
                return None
            return str(v) in frozen if type(v) is str else None

        return member

    def like(self, left: Expr) -> Expr:
        pattern = self.string_literal("a LIKE pattern")
        escape = None
        if self.accept("kw", "ESCAPE"):
            escape = self.string_literal("ESCAPE")
            if len(escape) != 1:
                raise self.error("ESCAPE takes exactly one character")
        try:
            regex = like_regex(pattern, escape)
        except ValueError as exc:
            raise self.error(str(exc)) from None
        fullmatch = regex.fullmatch

        def like(h: Headers) -> bool | None:
            v = left(h)
            if type(v) is not str:
                return None
            return fullmatch(v) is not None

        return like

    def sum_(self) -> Expr:
        left = self.product()
        while self.peek()[0] == "op" and self.peek()[1] in ("+", "-"):
            op = _arith(self.take()[1])
            right = self.product()
            left = (lambda f, a, b: lambda h: f(a(h), b(h)))(op, left, right)
        return left

    def product(self) -> Expr:
        left = self.unary()
        while self.peek()[0] == "op" and self.peek()[1] in ("*", "/"):
            op = _arith(self.take()[1])
            right = self.unary()
            left = (lambda f, a, b: lambda h: f(a(h), b(h)))(op, left, right)
        return left

    def unary(self) -> Expr:
        if self.peek() in (("op", "-"), ("op", "+")):
            sign = self.take()[1]
            self.nest()
            inner = self.unary()
            self.depth -= 1
            if sign == "+":
                return lambda h: _as_number(inner(h))
            return lambda h: None if (n := _as_number(inner(h))) is None else -n
        return self.primary()

    def primary(self) -> Expr:
        kind, value = self.take()
        if kind in ("str", "num"):
            return lambda h: value
        if kind == "kw" and value in ("TRUE", "FALSE"):
            flag = value == "TRUE"
            return lambda h: flag
        if kind == "kw" and value == "NULL":
            return lambda h: None
        if kind == "id":
            field = _JMS_FIELDS.get(value)
            if field is not None:
                return field
            return lambda h: h.get(value)
        if (kind, value) == ("op", "("):
            self.nest()
            inner = self.or_()
            self.depth -= 1
            self.expect("op", ")", "a closing parenthesis")
            return inner
        raise self.error(f"unexpected {_describe((kind, value))}")


def _truth(value: Value) -> bool | None:
    """A value used as a condition: booleans as they are, anything else unknown."""
    return value if value is True or value is False else None


def _describe(token: tuple[str, Any]) -> str:
    kind, value = token
    if kind == "end":
        return "the end of the selector"
    if kind == "str":
        return f"string {value!r}"
    return repr(str(value))


def compile_selector(text: str) -> Callable[[Headers], bool]:
    """``match(headers)``: True only when the selector evaluates to true (not false, not unknown)."""
    if not text.strip():
        raise SelectorError(text, "it is empty")
    expr = _Parser(text).parse()
    return lambda headers: expr(headers) is True
