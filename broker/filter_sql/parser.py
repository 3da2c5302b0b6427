"""A recursive-descent parser for upstream's SQL92 selector grammar (4.9.x ``SelectorParser.jj``).

Precedence, loosest first: OR; AND; ``=``, ``<>``, IS [NOT] NULL; ``<``, ``<=``, ``>``, ``>=``,
[NOT] BETWEEN, [NOT] IN; unary ``+``, ``-``, NOT; literals, properties and parentheses. Every
binary operator is left-associative. The static checks upstream makes while building the tree are
made here too, with the same outcome (an error): ordering operators only on numbers, properties and
sub-expressions that are not conditions; no ``= NULL``; IN only on a property and only with string
literals; BETWEEN with two constants needs low ≤ high; AND/OR/NOT only on conditions or properties.

One deliberate difference: upstream's start rule does not require the end of input, so it silently
ignores whatever follows a complete expression (``a = 1 b``); we report that as an error instead,
which only rejects expressions that could not have meant what they say.
"""

from __future__ import annotations

from broker.filter_sql.lexer import SqlParseError, Token, tokenize
from broker.filter_sql.nodes import And, BooleanCast, Compare, Constant, Equal, In, Negate, Node, Not, Or, Property
from broker.filter_sql.values import DOUBLE_MIN_VALUE, INT_MAX, LONG_MAX, EvalError, JLong, is_number, java_compare

#: Deeper trees than this are refused: the tree is evaluated recursively for every message.
MAX_DEPTH = 100


def parse(text: str) -> Node:
    """The tree of ``text`` as a condition; SqlParseError when upstream would refuse it."""
    if not isinstance(text, str):
        raise SqlParseError("the expression must be a string")
    if not text.strip():
        raise SqlParseError("the expression is empty")
    return _Parser(text).parse()


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.i = 0
        self.nesting = 0

    # -- token helpers ----------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def peek(self, ahead: int = 1) -> Token:
        return self.tokens[min(self.i + ahead, len(self.tokens) - 1)]

    def take(self) -> Token:
        token = self.tokens[self.i]
        if token.kind != "EOF":
            self.i += 1
        return token

    def expect(self, kind: str, what: str) -> Token:
        if self.tok.kind != kind:
            self.fail(f"expected {what} but found {self.tok.describe()}")
        return self.take()

    def fail(self, message: str, token: Token | None = None) -> None:
        raise SqlParseError(message, (token or self.tok).position, self.text)

    def checked(self, node: Node, token: Token) -> Node:
        if node.depth > MAX_DEPTH:
            self.fail(f"the expression nests more than {MAX_DEPTH} levels deep", token)
        return node

    # -- grammar ------------------------------------------------------------------------------
    def parse(self) -> Node:
        start = self.tok
        node = self.as_boolean(self.or_expression(), start)
        if self.tok.kind != "EOF":
            self.fail(f"unexpected {self.tok.describe()} after a complete expression")
        return node

    def as_boolean(self, node: Node, token: Token) -> Node:
        if node.is_boolean:
            return node
        if isinstance(node, Property):
            return BooleanCast(node)
        self.fail(f"expression will not result in a boolean value: {node.to_sql()}", token)
        raise AssertionError  # unreachable

    def or_expression(self) -> Node:
        start = self.tok
        left = self.and_expression()
        operands = [left]
        while self.tok.kind == "OR":
            self.take()
            right_start = self.tok
            right = self.and_expression()
            if len(operands) == 1:
                operands[0] = self.as_boolean(left, start)
            operands.append(self.as_boolean(right, right_start))
        return operands[0] if len(operands) == 1 else self.checked(Or(operands), start)

    def and_expression(self) -> Node:
        start = self.tok
        left = self.equality_expression()
        operands = [left]
        while self.tok.kind == "AND":
            self.take()
            right_start = self.tok
            right = self.equality_expression()
            if len(operands) == 1:
                operands[0] = self.as_boolean(left, start)
            operands.append(self.as_boolean(right, right_start))
        return operands[0] if len(operands) == 1 else self.checked(And(operands), start)

    def equality_expression(self) -> Node:
        left = self.comparison_expression()
        while True:
            token = self.tok
            if token.kind == "=":
                self.take()
                right = self.comparison_expression()
                left = self.checked(self.create_equal(left, right, token), token)
            elif token.kind == "<>":
                self.take()
                right = self.comparison_expression()
                left = self.checked(Not(self.create_equal(left, right, token)), token)
            elif token.kind == "IS":
                self.take()
                negated = self.tok.kind == "NOT"
                if negated:
                    self.take()
                self.expect("NULL", "NULL after IS" + (" NOT" if negated else ""))
                node: Node = Equal(left, Constant(None, boolean=True))
                left = self.checked(Not(node) if negated else node, token)
            else:
                return left

    def comparison_expression(self) -> Node:
        left = self.unary_expression()
        while True:
            token = self.tok
            kind = token.kind
            if kind in (">", ">=", "<", "<="):
                self.take()
                right = self.unary_expression()
                left = self.create_ordering(kind, left, right, token)
            elif kind == "BETWEEN" or (kind == "NOT" and self.peek().kind == "BETWEEN"):
                negated = kind == "NOT"
                self.take()
                if negated:
                    self.take()
                low = self.unary_expression()
                self.expect("AND", "AND between the BETWEEN bounds")
                high = self.unary_expression()
                if negated:
                    left = Or(
                        [self.create_ordering("<", left, low, token), self.create_ordering(">", left, high, token)]
                    )
                else:
                    self.check_between(low, high, token)
                    left = And(
                        [self.create_ordering(">=", left, low, token), self.create_ordering("<=", left, high, token)]
                    )
            elif kind == "IN" or (kind == "NOT" and self.peek().kind == "IN"):
                negated = kind == "NOT"
                self.take()
                if negated:
                    self.take()
                values = self.string_list()
                if not isinstance(left, Property):
                    self.fail(f"expected a property for an IN expression, got: {left.to_sql()}", token)
                left = In(left, values, negated)  # type: ignore[arg-type]
            else:
                return left
            left = self.checked(left, token)

    def string_list(self) -> list[str]:
        self.expect("(", "'(' after IN")
        values = [self.string_literal()]
        while self.tok.kind == ",":
            self.take()
            values.append(self.string_literal())
        self.expect(")", "')' closing the IN list")
        return values

    def string_literal(self) -> str:
        token = self.expect("STRING", "a string literal")
        return token.image[1:-1].replace("''", "'")

    def unary_expression(self) -> Node:
        token = self.tok
        if token.kind in ("+", "-", "NOT"):
            self.nesting += 1
            if self.nesting > MAX_DEPTH:
                self.fail(f"the expression nests more than {MAX_DEPTH} levels deep")
            self.take()
            operand_start = self.tok
            operand = self.unary_expression()
            self.nesting -= 1
            if token.kind == "+":
                return operand
            if token.kind == "-":
                return self.checked(Negate(operand), token)
            return self.checked(Not(self.as_boolean(operand, operand_start)), token)
        return self.primary_expression()

    def primary_expression(self) -> Node:
        token = self.tok
        kind = token.kind
        if kind == "(":
            self.nesting += 1
            if self.nesting > MAX_DEPTH:
                self.fail(f"the expression nests more than {MAX_DEPTH} levels deep")
            self.take()
            node = self.or_expression()
            self.expect(")", "')'")
            self.nesting -= 1
            return node
        if kind == "ID":
            self.take()
            return Property(token.image)
        if kind == "STRING":
            return Constant(self.string_literal())
        if kind == "DECIMAL":
            self.take()
            return Constant(self.decimal_value(token))
        if kind == "FLOAT":
            self.take()
            return Constant(self.float_value(token))
        if kind in ("TRUE", "FALSE", "NULL"):
            self.take()
            return Constant({"TRUE": True, "FALSE": False, "NULL": None}[kind], boolean=True)
        self.fail(f"expected a value, a property or '(' but found {token.describe()}")
        raise AssertionError  # unreachable

    def decimal_value(self, token: Token) -> int:
        text = token.image.rstrip("lL")
        # A length check first: Python refuses int() of very long digit strings (and it is a waste).
        value = int(text) if len(text) <= 19 else LONG_MAX + 1
        if value > LONG_MAX:
            self.fail(f"the number {text} is out of the range of a long", token)
        return value if value <= INT_MAX else JLong(value)

    def float_value(self, token: Token) -> float:
        value = float(token.image)
        if value == float("inf"):
            self.fail(f"{token.image} is greater than the largest double", token)
        if value < DOUBLE_MIN_VALUE:
            # Upstream compares with Double.MIN_VALUE, the smallest *positive* double, so it refuses
            # 0.0 and anything that rounds to it; an integer 0 is accepted.
            self.fail(f"{token.image} is less than 4.9E-324 (write 0 for zero)", token)
        return value

    # -- upstream's build-time checks -----------------------------------------------------------
    def create_equal(self, left: Node, right: Node, token: Token) -> Node:
        for operand in (left, right):
            if isinstance(operand, Constant) and operand.value is None:
                self.fail("NULL cannot be compared with '='; use IS NULL", token)
        if isinstance(left, Constant) and isinstance(right, Constant) and left.is_boolean and not right.is_boolean:
            self.fail(f"{left.to_sql()} cannot be compared with {right.to_sql()}", token)
        return Equal(left, right)

    def create_ordering(self, op: str, left: Node, right: Node, token: Token) -> Node:
        for operand in (left, right):
            if isinstance(operand, Constant):
                if not is_number(operand.value):
                    self.fail(f"value {operand.to_sql()} cannot be compared with '{op}'", token)
            elif operand.is_boolean:
                self.fail(f"value {operand.to_sql()} cannot be compared with '{op}'", token)
        return Compare(op, left, right)

    def check_between(self, low: Node, high: Node, token: Token) -> None:
        if not (isinstance(low, Constant) and isinstance(high, Constant)):
            return
        if low.value is None or high.value is None:
            self.fail("illegal values of BETWEEN: the bounds cannot be NULL", token)
        try:
            out_of_order = java_compare(high.value, low.value) < 0
        except EvalError as exc:
            self.fail(f"illegal values of BETWEEN: {exc}", token)
        if out_of_order:
            self.fail(
                f"illegal values of BETWEEN: the low bound {low.to_sql()} is greater than the high bound "
                f"{high.to_sql()}",
                token,
            )
