"""SQL92 property filters: upstream's grammar, its null/type rules, and clear errors for bad selectors.

The vectors in the first tests are the cases of upstream's own filter tests (ExpressionTest /
ParserTest, 4.9.x) with the results upstream asserts; the hypothesis tests check the evaluator
against an independent three-valued model, parse/print round trips, and that no input crashes it.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.filter_sql import MAX_DEPTH, SqlParseError, compile_sql92, parse
from broker.filter_sql.values import EvalError, JLong, compare_doubles, java_double_value_of, java_integer_value_of

SETTINGS = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


def matches(expr: str, **props: str) -> bool:
    return compile_sql92(expr)(props)


# -- upstream's vectors ------------------------------------------------------------------------------
AND = "a=3 and b<>4 And c>5 AND d<=4"
OR = "a=3 or b<>4 Or c>5 OR d<=4"


@pytest.mark.parametrize(
    ("expr", "props", "expected"),
    [
        ("a between 2 and 10", {"a": "2"}, True),
        ("a between 2 and 10", {"a": "10"}, True),
        ("a between 2 and 10", {"a": "3"}, True),
        ("a between 2 and 10", {"a": "1"}, False),
        ("a between 2 and 10", {"a": "11"}, False),
        ("a not between 2 and 10", {"a": "1"}, True),
        ("a not between 2 and 10", {"a": "11"}, True),
        ("a not between 2 and 10", {"a": "2"}, False),
        ("a not between 2 and 10", {"a": "3"}, False),
        ("a is null", {"abc": "2"}, True),
        ("a is null", {"a": "2"}, False),
        ("a is not null", {"a": "2"}, True),
        ("a is not null", {"abc": "2"}, False),
        ("a is not null and a='hello'", {"a": "hello"}, True),
        ("a is not null and a='hello'", {}, False),
        ("a is null OR a='hello'", {}, True),
        ("a is null OR a='hello'", {"a": "hello"}, True),
        ("a is null OR a='hello'", {"a": "abc"}, False),
        ("a=TRUE OR b=FALSE", {"a": "true", "b": "false"}, True),
        ("a=TRUE OR b=FALSE", {"a": "false", "b": "true"}, False),
        ("TAGS is not null and TAGS='''''tag'''''", {"TAGS": "''tag''"}, True),
        ("a > 3.1E10", {"a": str(3.1415 * 10**10)}, True),
        ("a > 3.14", {"a": "3.1415"}, True),
        ("a > b", {"a": "10", "b": "20"}, False),
        ("a > b", {"a": "20", "b": "10"}, True),
        ("a=b", {"a": "3.14", "b": "3.14"}, True),
        ("a<>b", {"a": "3.14", "b": "3.14"}, False),
        ("a<>b", {"a": "3.14", "b": "3.141"}, True),
        ("a between up and low", {"a": "3.14"}, False),
        ("key is not null and key between 0 and 100", {"key": "con"}, False),
        ("a between 0 and 100", {"a": "abc"}, False),
        (AND, {"a": "3", "b": "5", "c": "6", "d": "1"}, True),
        (AND, {"a": "4", "b": "5", "c": "6", "d": "1"}, False),
        (OR, {"a": "3"}, True),
        (OR, {"a": "4", "b": "5"}, True),
        (OR, {"a": "4", "b": "4", "c": "6"}, True),
        (OR, {"a": "4", "b": "4", "c": "3", "d": "2"}, True),
        (OR, {"a": "4", "b": "4", "c": "3", "d": "10"}, False),
        ("a in ('3', '4', '5')", {"a": "4"}, True),
        ("a in ('3', '4', '5')", {"a": "8"}, False),
        ("a not in ('3', '4', '5')", {"a": "8"}, True),
        ("a not in ('3', '4', '5')", {"a": "5"}, False),
    ],
)
def test_upstream_vectors(expr, props, expected):
    assert compile_sql92(expr)(props) is expected


@pytest.mark.parametrize(
    "expr",
    [
        "a=3  and    b<>4 And c>5 AND d<=4",
        "(a not in ('6', '4', '5')) or (b in ('3', '4', '5'))",
        "(a between 2 and 10) AND (b not between 6 and 9)",
        "a <= now",
        "a is null",
        "a is not null",
    ],
)
def test_upstream_valid_expressions_parse(expr):
    parse(expr)


def test_blank_insensitive_equality_like_upstream():
    assert parse(AND) == parse("a=3  and    b<>4 And c>5 AND d<=4")
    assert parse(AND) != parse(OR)


@pytest.mark.parametrize(
    "expr",
    [
        "a and between 2 and 10",
        " a between 10 and 0",
        "a > 100000000000000000000000",
        "a > 1" + "1" * 3000 + "." + "1" * 3000,  # a double out of range (and no crash on a huge literal)
    ],
)
def test_upstream_invalid_expressions(expr):
    with pytest.raises(SqlParseError):
        parse(expr)


# -- null and type rules -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "expr",
    [
        "a = 'x'",
        "a <> 'x'",
        "a > 1",
        "a < 1",
        "a >= 1",
        "a <= 1",
        "a BETWEEN 1 AND 2",
        "a NOT BETWEEN 1 AND 2",
        "a IN ('x')",
        "a NOT IN ('x')",
        "NOT (a = 'x')",
        "a",
        "-a = -1",
        "a = b",
    ],
)
def test_a_missing_property_never_matches(expr):
    assert not matches(expr, b="x")
    if expr != "a = b":
        assert not matches(expr)


def test_two_missing_properties_are_equal_like_upstream():
    # doCreateEqual: null == null is TRUE (that is how IS NULL works), so a = b holds when both are missing.
    assert matches("a = b") and not matches("a <> b")


def test_numeric_literal_types_follow_java():
    assert matches("a = 5", a="5") and matches("a = 5", a="+5") and matches("a = 5.0", a="5")
    # Integer literal: the property is read with Integer.valueOf, so a decimal string is an error (no match)
    assert not matches("a > 5", a="5.5") and matches("a > 5.0", a="5.5")
    assert not matches("a = 5", a=" 5") and not matches("a = 5", a="5_0") and not matches("a = 5", a="0x5")
    # Long literal (out of int range): the property is read with Long.valueOf
    assert matches("a = 5000000000", a="5000000000") and not matches("a = 5", a="5000000000")
    assert matches("a < 9223372036854775807", a="-9223372036854775808")
    # Double literal: Double.valueOf accepts exponents, a d/f suffix, surrounding control blanks, NaN
    assert matches("a = 1.5", a="15e-1") and matches("a = 1.5", a="1.5d") and matches("a = 1.5", a=" 1.5\t")
    assert matches("a > 1.5", a="NaN")  # Double.compare puts NaN above everything
    assert not matches("a = 1.5", a="1,5")
    assert matches("a = -5", a="-5") and matches("a > - 5", a="0") and matches("-5 < a", a="0")
    assert matches("a = 1", a="1") and not matches("a = '1'", a="01") and not matches("a = 1", a="x")


def test_booleans_and_strings():
    assert matches("a = TRUE", a="TRUE") and matches("a = TRUE", a="True") and not matches("a = TRUE", a="yes")
    assert matches("a = FALSE", a="no")  # Boolean.valueOf: anything but "true" is false
    assert not matches("TRUE = a", a="true")  # upstream throws (ClassCastException) with the constant on the left
    assert matches("TRUE") and not matches("FALSE") and not matches("NULL")
    assert not matches("a", a="true")  # a property used as a condition is never a Boolean
    assert matches("NOT a", a="true") and not matches("NOT a")
    assert matches("a = 'it''s'", a="it's") and matches("a = ''", a="") and not matches("a = ''")
    assert matches("a = 'ü✓'", a="ü✓")
    assert matches("x IS NULL AND 5 = 5 AND 'a' = 'a' AND 5 <> 6 AND 1 < 2.5 AND 2147483648 > 1")


def test_kleene_logic_of_and_or_not():
    assert matches("a = '1' OR b = '1'", a="1")  # the unknown right side does not matter
    assert not matches("a = '1' AND b = '1'", a="1")
    assert matches("NOT (a = '1' AND b = '1')", a="2")  # false AND unknown = false
    assert not matches("NOT (a = '1' AND b = '1')", a="1")  # true AND unknown = unknown
    assert not matches("NOT (a = 'x')")  # NOT unknown = unknown


def test_keywords_are_case_insensitive_and_comments_are_skipped():
    assert matches("a Between 1 aNd 3 /* block */ -- line\n OR b iS NoT nuLL", b="z")
    assert matches("$a_1 = 'v'", **{"$a_1": "v"})


@pytest.mark.parametrize(
    ("expr", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("a =", "expected a value"),
        ("a = NULL", "IS NULL"),
        ("a > 'x'", "cannot be compared"),
        ("a > TRUE", "cannot be compared"),
        ("(a = 1) > 2", "cannot be compared"),
        ("TRUE = 'x'", "cannot be compared"),
        ("a BETWEEN 3 AND 1", "BETWEEN"),
        ("a BETWEEN NULL AND 1", "NULL"),
        ("a IN (1, 2)", "string literal"),
        ("'x' IN ('x')", "property"),
        ("NOT a IN ('x')", "property"),
        ("a = 1 b", "after a complete expression"),
        ("a = 1)", "after a complete expression"),
        ("a = 'open", "not closed"),
        ("a != 1", "unexpected character '!'"),
        ("a = 1 AND 5", "boolean value"),
        ("5", "boolean value"),
        ("'x'", "boolean value"),
        ("-a", "boolean value"),
        ("a > 0.0", "write 0"),
        ("a > 1e400", "greater than"),
        ("a = 9223372036854775808", "range of a long"),
        ("a IS 5", "NULL after IS"),
        ("a.b = 1", "unexpected character '.'"),
        ("a = 1 -- comment without newline", "after a complete expression"),
        ("(" * (MAX_DEPTH + 1) + "a" + ")" * (MAX_DEPTH + 1), "nests"),
        ("NOT " * (MAX_DEPTH + 1) + "a", "nests"),
        (" AND ".join(["a = 1"] * 5000), None),
        ("a = " + " = ".join(["1"] * (MAX_DEPTH + 5)), "nests"),
    ],
)
def test_bad_expressions_say_what_is_wrong(expr, fragment):
    if fragment is None:  # long flat AND chains are fine: they do not nest
        assert matches(expr, a="1")
        return
    with pytest.raises(SqlParseError) as info:
        parse(expr)
    text = str(info.value)
    assert text.startswith("Invalid MessageSelector: ") and fragment in text, text
    if info.value.position is not None:
        assert re.search(r"at line \d+, column \d+$", text)


def test_position_points_at_the_offending_token():
    with pytest.raises(SqlParseError) as info:
        parse("a = 1 AND\n  b # 2")
    assert str(info.value).endswith("at line 2, column 5")


# -- Java conversions ---------------------------------------------------------------------------------
def test_java_value_parsers():
    assert java_integer_value_of("-12", long=False) == -12
    assert isinstance(java_integer_value_of("12", long=True), JLong)
    for bad in ("", "+", "1.0", " 1", "2147483648", "1_0"):
        with pytest.raises(EvalError):
            java_integer_value_of(bad, long=False)
    assert java_double_value_of("0x1.8p1") == 3.0 and java_double_value_of("-Infinity") == float("-inf")
    for bad in ("inf", "nan", "1e", "", "1.0.0", "١"):
        with pytest.raises(EvalError):
            java_double_value_of(bad)
    assert compare_doubles(-0.0, 0.0) == -1 and compare_doubles(float("nan"), float("inf")) == 1
    assert compare_doubles(float("nan"), float("nan")) == 0


@given(st.floats(allow_nan=False, allow_infinity=False))
@SETTINGS
def test_double_value_of_reads_python_reprs(x):
    assert java_double_value_of(repr(x)) == x


# -- a model of the semantics, for generated expressions -------------------------------------------
ERR = "ERR"
NAMES = ("a", "b", "c")
VALUES = st.one_of(
    st.none(), st.integers(-4, 4).map(str), st.sampled_from(["1.5", "x", "true", "", "-0", "99999999999"])
)
PROPS = st.fixed_dictionaries({n: VALUES for n in NAMES}).map(lambda d: {k: v for k, v in d.items() if v is not None})


def _int_or_err(v: str):
    return int(v) if re.fullmatch(r"[+-]?[0-9]+", v) and -(2**31) <= int(v) < 2**31 else ERR


@st.composite
def atoms(draw):
    name = draw(st.sampled_from(NAMES))
    kind = draw(st.sampled_from(["eq_s", "ne_s", "cmp", "between", "in", "null", "notnull", "eq_n"]))
    if kind in ("eq_s", "ne_s"):
        lit = draw(st.sampled_from(["x", "1", "", "it's"]))
        sql = f"{name} {'=' if kind == 'eq_s' else '<>'} '{lit.replace(chr(39), chr(39) * 2)}'"

        def model(p, lit=lit, neg=kind == "ne_s"):
            v = p.get(name)
            return None if v is None else (v == lit) != neg

        return sql, model
    if kind in ("cmp", "eq_n"):
        op = "=" if kind == "eq_n" else draw(st.sampled_from(["<", "<=", ">", ">="]))
        n = draw(st.integers(-3, 3))
        ops = {
            "<": lambda x: x < n,
            "<=": lambda x: x <= n,
            ">": lambda x: x > n,
            ">=": lambda x: x >= n,
            "=": lambda x: x == n,
        }

        def model(p, f=ops[op]):
            v = p.get(name)
            if v is None:
                return None
            x = _int_or_err(v)
            return ERR if x is ERR else f(x)

        return f"{name} {op} {n}", model
    if kind == "between":
        lo = draw(st.integers(-3, 3))
        hi = draw(st.integers(lo, 4))

        def model(p):
            v = p.get(name)
            if v is None:
                return None
            x = _int_or_err(v)
            return ERR if x is ERR else lo <= x <= hi

        return f"{name} BETWEEN {lo} AND {hi}", model
    if kind == "in":
        items = draw(st.lists(st.sampled_from(["x", "1", "true", ""]), min_size=1, max_size=3))
        quoted = ", ".join(f"'{i}'" for i in items)
        return f"{name} IN ({quoted})", lambda p: None if p.get(name) is None else p[name] in items
    if kind == "null":
        return f"{name} IS NULL", lambda p: name not in p
    return f"{name} IS NOT NULL", lambda p: name in p


def _and(left, right):
    a = left()
    if a is ERR:
        return ERR
    if a is False:
        return False
    b = right()
    if b is ERR:
        return ERR
    if b is False:
        return False
    return None if None in (a, b) else True


def _or(left, right):
    a = left()
    if a is ERR:
        return ERR
    if a is True:
        return True
    b = right()
    if b is ERR:
        return ERR
    if b is True:
        return True
    return None if None in (a, b) else False


def _not(v):
    return v if v in (None, ERR) else not v


expressions = st.recursive(
    atoms(),
    lambda children: st.one_of(
        st.tuples(children, children).map(
            lambda t: (f"({t[0][0]}) AND ({t[1][0]})", lambda p, t=t: _and(lambda: t[0][1](p), lambda: t[1][1](p)))
        ),
        st.tuples(children, children).map(
            lambda t: (f"({t[0][0]}) OR ({t[1][0]})", lambda p, t=t: _or(lambda: t[0][1](p), lambda: t[1][1](p)))
        ),
        children.map(lambda c: (f"NOT ({c[0]})", lambda p, c=c: _not(c[1](p)))),
    ),
    max_leaves=8,
)


@given(expressions, PROPS)
@SETTINGS
def test_evaluation_agrees_with_a_three_valued_model(expr, props):
    sql, model = expr
    assert compile_sql92(sql)(props) is (model(props) is True), sql


@given(expressions, PROPS)
@SETTINGS
def test_printed_tree_parses_back_to_the_same_meaning(expr, props):
    sql, _ = expr
    tree = parse(sql)
    again = parse(tree.to_sql())
    assert again.to_sql() == tree.to_sql()
    assert compile_sql92(tree.to_sql())(props) is compile_sql92(sql)(props)


@given(expressions, PROPS)
@SETTINGS
def test_not_never_matches_together_with_its_operand(expr, props):
    sql, _ = expr
    assert not (matches(sql, **props) and matches(f"NOT ({sql})", **props))


_TOKENS = st.sampled_from(
    [
        "a",
        "b",
        "=",
        "<>",
        "<",
        ">",
        "<=",
        ">=",
        "(",
        ")",
        ",",
        "+",
        "-",
        "NOT",
        "AND",
        "OR",
        "BETWEEN",
        "IN",
        "IS",
        "NULL",
        "TRUE",
        "FALSE",
        "1",
        "2.5",
        "'s'",
        "''''",
        "1e3",
        ".5",
        "/**/",
        "--c\n",
        "0.0",
        "9223372036854775808",
    ]
)


@given(st.lists(_TOKENS, max_size=14).map(" ".join))
@SETTINGS
def test_token_soup_either_parses_or_fails_cleanly(text):
    try:
        predicate = compile_sql92(text)
    except SqlParseError:
        return
    for props in ({}, {"a": "1", "b": "s"}, {"a": "x", "b": "2.5"}):
        assert predicate(props) in (True, False)


@given(st.text(max_size=60))
@SETTINGS
def test_arbitrary_text_either_parses_or_fails_cleanly(text):
    try:
        compile_sql92(text)({"a": "1"})
    except SqlParseError:
        pass
