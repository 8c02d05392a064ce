"""Spark SQL expressions of a Delta table's rules (CHECK constraints, invariants,
generated columns) parsed on the driver and evaluated over Arrow batches on the
executors with ``pyarrow.compute``, with Spark's semantics where they differ from
Arrow's: comparisons with NULL are NULL, ``AND`` / ``OR`` are three-valued, ``/``
divides as doubles.

What is understood: column names (plain or in backticks, case-insensitive as in
Spark), numbers, strings, ``TRUE`` / ``FALSE`` / ``NULL``; ``= == <=> != <> < <= > >=``,
``+ - * / %``, ``AND OR NOT``, ``IS [NOT] NULL``, ``[NOT] IN (...)``,
``[NOT] BETWEEN ... AND ...``, parentheses, and the functions ``length``,
``char_length``, ``lower``, ``upper``, ``abs``, ``coalesce``. Anything else raises
:class:`UnsupportedExpressionError` when parsed (the callers refuse the table at the
start, naming the rule).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from spark_chkpt.errors import UnsupportedExpressionError

if TYPE_CHECKING:
    import pyarrow as pa

# A parsed expression: ("col", name) | ("lit", value) | ("op", op, left, right)
# | ("not", e) | ("isnull", e, negated) | ("in", e, [items], negated) | ("call", f, [args])
Node = tuple[Any, ...]

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+\.\d*|\.\d+|\d+)(?P<suffix>[LlDd]?)|'(?P<str>(?:[^'\\]|\\.|'')*)'"
    r"|`(?P<quoted>[^`]+)`|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op><=>|<=|>=|<>|!=|==|[=<>+\-*/%(),]))"
)
_FUNCTIONS = {"length", "char_length", "lower", "upper", "abs", "coalesce"}
_COMPARE = {"=", "==", "<=>", "!=", "<>", "<", "<=", ">", ">="}


def _tokens(text: str) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise UnsupportedExpressionError(f"cannot read {text[pos:]!r}")
        pos = m.end()
        if m["num"] is not None:
            raw = m["num"]
            value: Any = float(raw) if ("." in raw or m["suffix"] in ("D", "d")) else int(raw)
            out.append(("lit", value))
        elif m["str"] is not None:
            out.append(("lit", m["str"].replace("''", "'").replace("\\'", "'")))
        elif m["quoted"] is not None:
            out.append(("name", m["quoted"]))
        elif m["name"] is not None:
            word = m["name"]
            upper = word.upper()
            if upper in ("AND", "OR", "NOT", "IS", "NULL", "IN", "BETWEEN", "TRUE", "FALSE"):
                out.append(("kw", upper))
            else:
                out.append(("name", word))
        else:
            out.append(("op", m["op"]))
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.i = 0

    def peek(self, kind: str, value: Any = None) -> bool:
        if self.i >= len(self.tokens):
            return False
        k, v = self.tokens[self.i]
        return k == kind and (value is None or v == value)

    def take(self, kind: str, value: Any = None) -> Any:
        if not self.peek(kind, value):
            got = self.tokens[self.i][1] if self.i < len(self.tokens) else "the end"
            raise UnsupportedExpressionError(f"expected {value or kind}, found {got!r}")
        self.i += 1
        return self.tokens[self.i - 1][1]

    def parse(self) -> Node:
        node = self.or_()
        if self.i != len(self.tokens):
            raise UnsupportedExpressionError(f"unexpected {self.tokens[self.i][1]!r}")
        return node

    def or_(self) -> Node:
        node = self.and_()
        while self.peek("kw", "OR"):
            self.i += 1
            node = ("op", "OR", node, self.and_())
        return node

    def and_(self) -> Node:
        node = self.not_()
        while self.peek("kw", "AND"):
            self.i += 1
            node = ("op", "AND", node, self.not_())
        return node

    def not_(self) -> Node:
        if self.peek("kw", "NOT"):
            self.i += 1
            return ("not", self.not_())
        return self.predicate()

    def predicate(self) -> Node:
        node = self.additive()
        if self.peek("kw", "IS"):
            self.i += 1
            negated = self.peek("kw", "NOT")
            if negated:
                self.i += 1
            self.take("kw", "NULL")
            return ("isnull", node, negated)
        negated = False
        if self.peek("kw", "NOT"):
            self.i += 1
            negated = True
        if self.peek("kw", "IN"):
            self.i += 1
            self.take("op", "(")
            items = [self.additive()]
            while self.peek("op", ","):
                self.i += 1
                items.append(self.additive())
            self.take("op", ")")
            return ("in", node, items, negated)
        if self.peek("kw", "BETWEEN"):
            self.i += 1
            low = self.additive()
            self.take("kw", "AND")
            high = self.additive()
            between = ("op", "AND", ("op", ">=", node, low), ("op", "<=", node, high))
            return ("not", between) if negated else between
        if negated:
            raise UnsupportedExpressionError("NOT must be followed by IN or BETWEEN here")
        if self.i < len(self.tokens) and self.tokens[self.i] in [("op", o) for o in _COMPARE]:
            op = self.take("op")
            return ("op", op, node, self.additive())
        return node

    def additive(self) -> Node:
        node = self.term()
        while self.peek("op", "+") or self.peek("op", "-"):
            op = self.take("op")
            node = ("op", op, node, self.term())
        return node

    def term(self) -> Node:
        node = self.unary()
        while self.peek("op", "*") or self.peek("op", "/") or self.peek("op", "%"):
            op = self.take("op")
            node = ("op", op, node, self.unary())
        return node

    def unary(self) -> Node:
        if self.peek("op", "-"):
            self.i += 1
            return ("op", "-", ("lit", 0), self.unary())
        return self.atom()

    def atom(self) -> Node:
        if self.peek("op", "("):
            self.i += 1
            node = self.or_()
            self.take("op", ")")
            return node
        if self.peek("lit"):
            return ("lit", self.take("lit"))
        if self.peek("kw", "NULL"):
            self.i += 1
            return ("lit", None)
        if self.peek("kw", "TRUE") or self.peek("kw", "FALSE"):
            return ("lit", self.take("kw") == "TRUE")
        name = self.take("name")
        if self.peek("op", "("):
            if name.lower() not in _FUNCTIONS:
                raise UnsupportedExpressionError(f"function {name}() is not evaluated here")
            self.i += 1
            args = [self.or_()]
            while self.peek("op", ","):
                self.i += 1
                args.append(self.or_())
            self.take("op", ")")
            return ("call", name.lower(), args)
        return ("col", name)


def parse(expression: str) -> Node:
    """The parsed form of a Spark SQL expression; :class:`UnsupportedExpressionError`
    for one outside what this module evaluates (see the module docstring)."""
    return _Parser(expression).parse()


def columns_of(node: Node) -> set[str]:
    kind = node[0]
    if kind == "col":
        return {node[1]}
    if kind == "lit":
        return set()
    found: set[str] = set()
    for part in node[1:]:
        if isinstance(part, tuple):
            found |= columns_of(part)
        elif isinstance(part, list):
            for item in part:
                found |= columns_of(item)
    return found


def evaluate(node: Node, batch: pa.RecordBatch) -> Any:
    """``node`` over ``batch``: an Arrow array (or a scalar for a constant)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = node[0]
    if kind == "col":
        lower = {n.lower(): i for i, n in enumerate(batch.schema.names)}
        return batch.column(lower[node[1].lower()])
    if kind == "lit":
        return pa.scalar(node[1])
    if kind == "not":
        return pc.invert(evaluate(node[1], batch))
    if kind == "isnull":
        value = evaluate(node[1], batch)
        return pc.is_valid(value) if node[2] else pc.is_null(value)
    if kind == "in":
        value = evaluate(node[1], batch)
        result = None
        for item in node[2]:
            hit = pc.equal(value, evaluate(item, batch))
            result = hit if result is None else pc.or_kleene(result, hit)
        return pc.invert(result) if node[3] else result
    if kind == "call":
        return _call(node[1], [evaluate(a, batch) for a in node[2]])
    return _binary(node[1], evaluate(node[2], batch), evaluate(node[3], batch))


def _call(name: str, args: list[Any]) -> Any:
    """A function of the rules' dialect over its evaluated arguments."""
    import pyarrow.compute as pc

    if name in ("length", "char_length"):
        return pc.utf8_length(args[0])
    if name == "lower":
        return pc.utf8_lower(args[0])
    if name == "upper":
        return pc.utf8_upper(args[0])
    if name == "abs":
        return pc.abs(args[0])
    return pc.coalesce(*args)


def _binary(op: str, left: Any, right: Any) -> Any:
    """A binary operator over its evaluated operands, with Spark SQL's null rules
    (``AND`` / ``OR`` three-valued, ``<=>`` null-safe, ``/`` in doubles)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if op == "AND":
        return pc.and_kleene(left, right)
    if op == "OR":
        return pc.or_kleene(left, right)
    if op == "<=>":
        both_null = pc.and_(pc.is_null(left), pc.is_null(right))
        return pc.if_else(
            pc.or_(pc.is_null(left), pc.is_null(right)), both_null, pc.equal(left, right)
        )
    if op == "/":
        return pc.divide(pc.cast(left, pa.float64()), pc.cast(right, pa.float64()))
    functions = {
        "=": pc.equal,
        "==": pc.equal,
        "!=": pc.not_equal,
        "<>": pc.not_equal,
        "<": pc.less,
        "<=": pc.less_equal,
        ">": pc.greater,
        ">=": pc.greater_equal,
        "+": pc.add,
        "-": pc.subtract,
        "*": pc.multiply,
    }
    if op == "%":
        quotient = pc.divide(left, right)
        return pc.subtract(left, pc.multiply(quotient, right))
    return functions[op](left, right)
