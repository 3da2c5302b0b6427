"""fastjson-tolerant JSON: the one parser our clients use for name-server and broker answers.

Java RocketMQ serializes with fastjson, which writes map keys that are not strings: numbers
(``{0:"127.0.0.1:10911"}`` in routes of name servers before 4.9.4) and whole objects (MessageQueue-keyed
offset tables, protocol.md §4.1, §4.5). ``json`` refuses both; this parser accepts them.
"""

from __future__ import annotations

import json
from typing import Any


class _LenientParser:
    """JSON where an object's keys may be any value (fastjson writes ``{0:"a"}`` and ``{{..mq..}:{..}}``).

    Non-string keys come back as their compact, key-sorted JSON text, so a MessageQueue key reads
    ``{"brokerName":"b","queueId":0,"topic":"t"}`` whichever order the server wrote.
    """

    _decoder = json.JSONDecoder()

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def _ws(self) -> None:
        text, pos = self.text, self.pos
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        self.pos = pos

    def value(self) -> Any:
        self._ws()
        if self.pos >= len(self.text):
            raise ValueError("unexpected end of JSON")
        ch = self.text[self.pos]
        if ch == "{":
            return self._object()
        if ch == "[":
            return self._array()
        value, self.pos = self._decoder.raw_decode(self.text, self.pos)
        return value

    def _expect(self, ch: str) -> None:
        self._ws()
        if self.pos >= len(self.text) or self.text[self.pos] != ch:
            got = self.text[self.pos : self.pos + 10] or "end of input"
            raise ValueError(f"expected {ch!r} at offset {self.pos}, got {got!r}")
        self.pos += 1

    def _object(self) -> dict[str, Any]:
        self._expect("{")
        out: dict[str, Any] = {}
        self._ws()
        if self.text.startswith("}", self.pos):
            self.pos += 1
            return out
        while True:
            key = self.value()
            if not isinstance(key, str):
                key = json.dumps(key, sort_keys=True, separators=(",", ":"))
            self._expect(":")
            out[key] = self.value()
            self._ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            self._expect("}")
            return out

    def _array(self) -> list[Any]:
        self._expect("[")
        out: list[Any] = []
        self._ws()
        if self.text.startswith("]", self.pos):
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            self._ws()
            if self.text.startswith(",", self.pos):
                self.pos += 1
                continue
            self._expect("]")
            return out


def parse_fastjson(body: bytes | memoryview | str | None) -> Any:
    """Parse a body that may use fastjson's non-string map keys; ValueError with the position if broken."""
    if body is None:
        return None
    text = body if isinstance(body, str) else bytes(body).decode("utf-8")
    if not text.strip():
        return None
    parser = _LenientParser(text)
    value = parser.value()
    parser._ws()
    if parser.pos != len(text):
        raise ValueError(f"trailing data at offset {parser.pos}")
    return value
