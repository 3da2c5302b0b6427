"""Tokens of upstream's SQL92 selector grammar (``filter/.../parser/SelectorParser.jj``, 4.9.x).

Like the JavaCC token manager: whitespace is `` \\t\\n\\r\\f`` only, ``--`` comments run to a line end
(and need one), ``/* */`` comments, keywords and identifiers are case-insensitive, the longest match
wins and a keyword beats an identifier of the same length. Identifiers are ASCII letters, digits,
``_`` and ``$`` (no dots). Strings are single-quoted with ``''`` for a quote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KEYWORDS = frozenset({"NOT", "AND", "OR", "BETWEEN", "IN", "TRUE", "FALSE", "NULL", "IS"})
PUNCTUATION = ("<>", "<=", ">=", "=", "<", ">", "(", ")", ",", "+", "-")

_WHITESPACE = frozenset(" \t\n\r\f")
_LINE_COMMENT = re.compile(r"--[^\n\r]*(?:\r\n|\n|\r)")
_BLOCK_COMMENT = re.compile(r"/\*[^*]*\*+(?:[^/*][^*]*\*+)*/")
_DECIMAL = re.compile(r"0|[1-9][0-9]*[lL]?")
_FLOATS = (
    re.compile(r"[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?"),
    re.compile(r"\.[0-9]+(?:[eE][+-]?[0-9]+)?"),
    re.compile(r"[0-9]+[eE][+-]?[0-9]+"),
)
_STRING = re.compile(r"'(?:''|[^'])*'")
_ID = re.compile(r"[a-zA-Z_$][a-zA-Z0-9_$]*")


class SqlParseError(ValueError):
    """The expression is not valid upstream SQL92: a message that says what and where."""

    def __init__(self, message: str, position: int | None = None, text: str | None = None) -> None:
        where = ""
        if position is not None and text is not None:
            line = text.count("\n", 0, position) + 1
            column = position - (text.rfind("\n", 0, position) + 1) + 1
            where = f" at line {line}, column {column}"
        super().__init__(f"Invalid MessageSelector: {message}{where}")
        self.position = position


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # a keyword, a punctuation string, "DECIMAL", "FLOAT", "STRING", "ID" or "EOF"
    image: str
    position: int

    def describe(self) -> str:
        return "end of expression" if self.kind == "EOF" else repr(self.image)


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    pos, end = 0, len(text)
    while True:
        # skip whitespace and comments (SPECIAL_TOKEN / SKIP)
        while pos < end:
            ch = text[pos]
            if ch in _WHITESPACE:
                pos += 1
                continue
            m = _LINE_COMMENT.match(text, pos) if ch == "-" else _BLOCK_COMMENT.match(text, pos) if ch == "/" else None
            if m is None:
                break
            pos = m.end()
        if pos >= end:
            tokens.append(Token("EOF", "", pos))
            return tokens
        tokens.append(_next_token(text, pos))
        pos += len(tokens[-1].image)


def _next_token(text: str, pos: int) -> Token:
    ch = text[pos]
    if ch.isascii() and (ch.isdigit() or ch == "."):
        best: tuple[str, str] | None = None
        m = _DECIMAL.match(text, pos)
        if m:
            best = ("DECIMAL", m.group())
        for pattern in _FLOATS:
            m = pattern.match(text, pos)
            if m and (best is None or len(m.group()) > len(best[1])):
                best = ("FLOAT", m.group())
        if best is None:
            raise SqlParseError("unexpected character '.'", pos, text)
        return Token(best[0], best[1], pos)
    if ch == "'":
        m = _STRING.match(text, pos)
        if m is None:
            raise SqlParseError("string literal is not closed with a quote", pos, text)
        return Token("STRING", m.group(), pos)
    m = _ID.match(text, pos)
    if m:
        word = m.group()
        upper = word.upper()
        return Token(upper if upper in KEYWORDS else "ID", word, pos)
    for punct in PUNCTUATION:
        if text.startswith(punct, pos):
            return Token(punct, punct, pos)
    raise SqlParseError(f"unexpected character {ch!r}", pos, text)
