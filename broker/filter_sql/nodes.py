"""The expression tree of a parsed SQL92 selector, evaluated with upstream's three-valued rules.

Each node's ``evaluate(properties)`` returns a Java-typed value (see ``values``): ``True``/``False``,
``None`` for SQL's unknown, a number or a string. A missing property is ``None``, and any comparison
with ``None`` is unknown, so it never matches; ``NOT`` of unknown stays unknown. A message matches
only when the whole expression is ``True``. ``to_sql`` prints a fully parenthesised equivalent that
the parser reads back to the same tree (used by the round-trip tests).

AND/OR chains are flattened into one node: in Kleene logic they are associative, and evaluating the
operands left to right stopping at the first decisive one is exactly what upstream's nested binary
nodes do (including which operands get evaluated, which matters when one of them throws).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.filter_sql.values import EvalError, java_compare, java_double_value_of, java_literal, negate

Properties = Mapping[str, str]


class Node:
    __slots__ = ("depth",)
    #: upstream's BooleanExpression marker: what AND/OR/NOT accept without a boolean cast
    is_boolean = False

    def evaluate(self, props: Properties) -> Any:
        raise NotImplementedError

    def to_sql(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.to_sql()})"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.to_sql() == other.to_sql()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self.to_sql())


class Constant(Node):
    """A literal. TRUE, FALSE and NULL are upstream's BooleanConstantExpression (boolean-typed)."""

    __slots__ = ("is_boolean", "value")

    def __init__(self, value: Any, *, boolean: bool = False) -> None:
        self.value = value
        self.is_boolean = boolean  # type: ignore[misc]
        self.depth = 1

    def evaluate(self, props: Properties) -> Any:
        return self.value

    def to_sql(self) -> str:
        return java_literal(self.value)


class Property(Node):
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name
        self.depth = 1

    def evaluate(self, props: Properties) -> Any:
        return props.get(self.name)

    def to_sql(self) -> str:
        return self.name


class Unary(Node):
    """An operator on one operand; NULL in gives NULL out (SQL92), `apply` decides the rest."""

    __slots__ = ("operand",)

    def __init__(self, operand: Node) -> None:
        self.operand = operand
        self.depth = operand.depth + 1

    def evaluate(self, props: Properties) -> Any:
        value = self.operand.evaluate(props)
        return None if value is None else self.apply(value)

    def apply(self, value: Any) -> Any:
        raise NotImplementedError


class Negate(Unary):
    __slots__ = ()

    def apply(self, value: Any) -> Any:
        return negate(value)

    def to_sql(self) -> str:
        return f"(- {self.operand.to_sql()})"


class BooleanCast(Unary):
    """A bare property used as a condition: true only if its value is a Boolean true (never, for strings)."""

    __slots__ = ()
    is_boolean = True

    def apply(self, value: Any) -> Any:
        return value if isinstance(value, bool) else False

    def to_sql(self) -> str:
        return self.operand.to_sql()


class Not(Unary):
    __slots__ = ()
    is_boolean = True

    def apply(self, value: Any) -> Any:
        if not isinstance(value, bool):
            raise EvalError(f"{type(value).__name__} cannot be cast to java.lang.Boolean")
        return not value

    def to_sql(self) -> str:
        return f"(NOT {self.operand.to_sql()})"


class _Junction(Node):
    """AND / OR over flattened operands with SQL's three-valued logic: an operand equal to ``decisive``
    decides at once, an unknown (None) operand makes an undecided result unknown."""

    __slots__ = ("operands",)
    is_boolean = True
    keyword = ""
    decisive = False

    def __init__(self, operands: list[Node]) -> None:
        flat: list[Node] = []
        for op in operands:
            flat.extend(op.operands if type(op) is type(self) else (op,))  # type: ignore[attr-defined]
        self.operands = tuple(flat)
        self.depth = max(op.depth for op in self.operands) + 1

    def evaluate(self, props: Properties) -> Any:
        decisive = self.decisive
        unknown = False
        for op in self.operands:
            value = op.evaluate(props)
            if value is decisive:
                return decisive
            if value is None:
                unknown = True
            elif type(value) is not bool:
                raise EvalError(f"{self.keyword} operand is not a Boolean")
        return None if unknown else not decisive

    def to_sql(self) -> str:
        return "(" + f" {self.keyword} ".join(op.to_sql() for op in self.operands) + ")"


class And(_Junction):
    __slots__ = ()
    keyword = "AND"
    decisive = False


class Or(_Junction):
    __slots__ = ()
    keyword = "OR"
    decisive = True


class Equal(Node):
    """``=`` and IS NULL (upstream doCreateEqual): null on the left only is unknown, on the right false."""

    __slots__ = ("left", "right")
    is_boolean = True

    def __init__(self, left: Node, right: Node) -> None:
        self.left, self.right = left, right
        self.depth = max(left.depth, right.depth) + 1

    def evaluate(self, props: Properties) -> Any:
        lv = self.left.evaluate(props)
        rv = self.right.evaluate(props)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        return java_compare(lv, rv) == 0

    def to_sql(self) -> str:
        if isinstance(self.right, Constant) and self.right.value is None:
            return f"({self.left.to_sql()} IS NULL)"
        return f"({self.left.to_sql()} = {self.right.to_sql()})"


_ORDER_TESTS = {">": lambda c: c > 0, ">=": lambda c: c >= 0, "<": lambda c: c < 0, "<=": lambda c: c <= 0}


class Compare(Node):
    """``<``, ``<=``, ``>``, ``>=``: unknown on any null; two strings are compared as doubles or throw."""

    __slots__ = ("_test", "left", "op", "right")
    is_boolean = True

    def __init__(self, op: str, left: Node, right: Node) -> None:
        self.op, self.left, self.right = op, left, right
        self._test = _ORDER_TESTS[op]
        self.depth = max(left.depth, right.depth) + 1

    def evaluate(self, props: Properties) -> Any:
        lv = self.left.evaluate(props)
        if lv is None:
            return None
        rv = self.right.evaluate(props)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            cmp = java_compare(java_double_value_of(lv), java_double_value_of(rv))
        else:
            cmp = java_compare(lv, rv)
        return self._test(cmp)

    def to_sql(self) -> str:
        return f"({self.left.to_sql()} {self.op} {self.right.to_sql()})"


class In(Node):
    """``prop [NOT] IN ('a', 'b')``: only string values take part; anything else is unknown."""

    __slots__ = ("_listed", "negated", "operand", "values")
    is_boolean = True

    def __init__(self, operand: Property, values: list[str], negated: bool) -> None:
        self.operand, self.values, self.negated = operand, tuple(values), negated
        self._listed = frozenset(values)
        self.depth = operand.depth + 1

    def evaluate(self, props: Properties) -> Any:
        value = self.operand.evaluate(props)
        if value is None or not isinstance(value, str):
            return None
        return (value in self._listed) != self.negated

    def to_sql(self) -> str:
        items = ", ".join(java_literal(v) for v in self.values)
        return f"({self.operand.to_sql()} {'NOT IN' if self.negated else 'IN'} ({items}))"
