"""Java value semantics for SQL92 filters: the types upstream's expressions produce and how they compare.

Upstream evaluates selectors over Java objects: message properties are ``String``, decimal literals are
``Integer`` (``Long`` when out of int range), floating literals ``Double``, TRUE/FALSE ``Boolean``. Its
``ComparisonExpression.__compare`` converts between them one way and not the other (a String property
against an Integer literal is parsed with ``Integer.valueOf``, so ``"5.5" > 5`` is an error, not true).
These functions reproduce that, in Python: ``bool`` = Boolean, ``int`` = Integer, :class:`JLong` = Long,
``float`` = Double, ``str`` = String, ``None`` = null. A conversion Java would refuse raises
:class:`EvalError`; the filter then treats the message as not matched, as upstream's broker does.
"""

from __future__ import annotations

import math
import re
import struct

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
DOUBLE_MIN_VALUE = 5e-324  # Java Double.MIN_VALUE: the smallest positive double

_D = struct.Struct(">d")
_Q = struct.Struct(">q")
_CANONICAL_NAN_BITS = 0x7FF8000000000000

# Integer.valueOf / Long.valueOf: an optional sign and decimal digits, nothing else (no spaces, no "_").
_JAVA_INTEGER = re.compile(r"[+-]?\d+")
# Double.valueOf after trimming chars <= ' ': decimal (with optional f/d suffix), NaN, Infinity, hex.
_JAVA_DOUBLE = re.compile(r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)")
_JAVA_HEX_DOUBLE = re.compile(r"([+-]?)(0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?[0-9]+)[fFdD]?")


class EvalError(Exception):
    """A conversion or cast that throws in Java (NumberFormatException, ClassCastException)."""


class JLong(int):
    """A Java Long (a plain ``int`` stands for a Java Integer)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"JLong({int(self)})"


def java_type(value: object) -> str:
    """Upstream's class name of an evaluated value (for messages and dispatch)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "Boolean"
    if isinstance(value, JLong):
        return "Long"
    if isinstance(value, int):
        return "Integer"
    if isinstance(value, float):
        return "Double"
    if isinstance(value, str):
        return "String"
    raise EvalError(f"unsupported value type {type(value).__name__}")


def is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def java_integer_value_of(text: str, *, long: bool) -> int:
    if not _JAVA_INTEGER.fullmatch(text):
        raise EvalError(f'For input string: "{text}"')
    value = int(text)
    lo, hi = (LONG_MIN, LONG_MAX) if long else (INT_MIN, INT_MAX)
    if not lo <= value <= hi:
        raise EvalError(f'For input string: "{text}" (out of range)')
    return JLong(value) if long else value


def java_double_value_of(text: str) -> float:
    # Java trims every char <= ' ' (not Unicode whitespace) before parsing.
    start, end = 0, len(text)
    while start < end and text[start] <= " ":
        start += 1
    while end > start and text[end - 1] <= " ":
        end -= 1
    s = text[start:end]
    if _JAVA_DOUBLE.fullmatch(s):
        if s[-1] in "fFdD" and not s.endswith("Infinity"):
            s = s[:-1]
        return float(s)
    m = _JAVA_HEX_DOUBLE.fullmatch(s)
    if m:
        value = float.fromhex(m.group(2))
        return -value if m.group(1) == "-" else value
    raise EvalError(f'For input string: "{text}"')


def java_boolean_value_of(text: str) -> bool:
    return text.lower() == "true"


def _double_bits(value: float) -> int:
    if math.isnan(value):
        return _CANONICAL_NAN_BITS
    return _Q.unpack(_D.pack(value))[0]


def compare_doubles(a: float, b: float) -> int:
    """Double.compare: total order with -0.0 < 0.0 and NaN above everything (equal to itself)."""
    if a < b:
        return -1
    if a > b:
        return 1
    bits_a, bits_b = _double_bits(a), _double_bits(b)
    return 0 if bits_a == bits_b else (-1 if bits_a < bits_b else 1)


def _compare_same(lv: object, rv: object) -> int:
    if isinstance(lv, float):
        return compare_doubles(lv, rv)  # type: ignore[arg-type]
    if isinstance(lv, str):
        # String.compareTo orders UTF-16 code units; only its sign matters and only equality is ever
        # asked of strings (ordering operators on two strings go through Double first).
        a, b = lv.encode("utf-16-be"), rv.encode("utf-16-be")  # type: ignore[union-attr]
        return (a > b) - (a < b)
    return (lv > rv) - (lv < rv)  # type: ignore[operator]


def java_compare(lv: object, rv: object) -> int:
    """``ComparisonExpression.__compare(lv, rv, convertStringExpressions=true)`` for non-null values."""
    lt, rt = java_type(lv), java_type(rv)
    if lt == rt:
        return _compare_same(lv, rv)
    if lt == "Boolean":
        if rt == "String":
            # Upstream casts the Boolean itself to String here: a ClassCastException.
            raise EvalError("java.lang.Boolean cannot be cast to java.lang.String")
        return -1
    if lt == "Integer":
        if rt == "Long":
            return _compare_same(int(lv), int(rv))  # type: ignore[call-overload]
        if rt == "Double":
            return compare_doubles(float(lv), rv)  # type: ignore[arg-type]
        if rt == "String":
            return _compare_same(lv, java_integer_value_of(rv, long=False))  # type: ignore[arg-type]
        return -1
    if lt == "Long":
        if rt == "Integer":
            return _compare_same(int(lv), int(rv))  # type: ignore[call-overload]
        if rt == "Double":
            return compare_doubles(float(lv), rv)  # type: ignore[arg-type]
        if rt == "String":
            return _compare_same(int(lv), int(java_integer_value_of(rv, long=True)))  # type: ignore[arg-type,call-overload]
        return -1
    if lt == "Double":
        if rt in ("Integer", "Long"):
            return compare_doubles(lv, float(rv))  # type: ignore[arg-type]
        if rt == "String":
            return compare_doubles(lv, java_double_value_of(rv))  # type: ignore[arg-type]
        return -1
    if lt == "String":
        if rt == "Boolean":
            return _compare_same(java_boolean_value_of(lv), rv)  # type: ignore[arg-type]
        if rt == "Integer":
            return _compare_same(java_integer_value_of(lv, long=False), rv)  # type: ignore[arg-type]
        if rt == "Long":
            return _compare_same(int(java_integer_value_of(lv, long=True)), int(rv))  # type: ignore[arg-type,call-overload]
        if rt == "Double":
            return compare_doubles(java_double_value_of(lv), rv)  # type: ignore[arg-type]
        return -1
    return -1


def negate(value: object) -> object:
    """UnaryExpression.negate: numbers keep their Java type (and wrap like Java); anything else is null."""
    if not is_number(value):
        return None
    if isinstance(value, JLong):
        result = -int(value)
        return JLong(result if result <= LONG_MAX else LONG_MIN)
    if isinstance(value, int):
        result = -value
        return result if result <= INT_MAX else INT_MIN
    return -value  # type: ignore[operator]


def java_literal(value: object) -> str:
    """ConstantExpression.toString for a value, in a form our parser reads back to the same value."""
    if value is None:
        return "NULL"
    if value is True:
        return "TRUE"
    if value is False:
        return "FALSE"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, float):
        text = repr(value)
        return text if ("." in text or "e" in text) else text + ".0"
    return str(int(value))  # type: ignore[call-overload]
