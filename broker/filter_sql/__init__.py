"""SQL92 property filters (``expressionType=SQL92``, ``enablePropertyFilter=true``), as upstream 4.9.

``compile_sql92(text)`` parses a selector such as ``a > 5 AND b IN ('x', 'y') AND c IS NOT NULL``
into a predicate over a message's properties, or raises :class:`SqlParseError` (a ``ValueError``)
with a message saying what is wrong and where. A predicate returns ``True`` only when the selector
evaluates to TRUE; unknown (a missing property), false, and anything that throws in upstream (a
property that is not a number compared with a number) all mean "not matched".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from broker.filter_sql.lexer import SqlParseError
from broker.filter_sql.nodes import Node
from broker.filter_sql.parser import MAX_DEPTH, parse
from broker.filter_sql.values import EvalError

__all__ = ["MAX_DEPTH", "Sql92Predicate", "SqlParseError", "compile_sql92", "parse"]


class Sql92Predicate:
    """A compiled selector: call it with a properties mapping."""

    __slots__ = ("expression", "tree")

    def __init__(self, expression: str, tree: Node) -> None:
        self.expression = expression
        self.tree = tree

    def evaluate(self, properties: Mapping[str, str]) -> object:
        """The raw three-valued result (True/False/None); raises EvalError where upstream throws."""
        return self.tree.evaluate(properties)

    def __call__(self, properties: Mapping[str, str] | None) -> bool:
        try:
            return self.tree.evaluate(properties or {}) is True
        except (EvalError, ValueError, TypeError, OverflowError):
            return False

    def __repr__(self) -> str:
        return f"Sql92Predicate({self.expression!r})"


def compile_sql92(expression: str) -> Callable[[Mapping[str, str] | None], bool]:
    return Sql92Predicate(expression, parse(expression))
