"""Message filters handed to the store, and the broker's compiler of subscription expressions.

Tag subscriptions filter in two stages, as the store's MessageFilter protocol expects: the consume
queue holds a 32-bit hash of the TAGS property, which the store matches against ``tags_code_set()``
vectorised with numpy; two tags can share a hash, so that is only a candidate, and
``is_matched_by_commit_log`` then checks the stored TAGS string itself. Upstream skips that second
check and leaves it to the clients, but a client that gets a colliding message it did not subscribe
to still has to pull and drop it; checking here costs one property lookup per candidate.

SQL92 subscriptions (``enablePropertyFilter``) match every consume-queue entry and decide on the
record's properties. ``ExpressionCompiler`` turns (type, expression) into a predicate over a
properties mapping, caching compiled expressions and parse failures (upstream caches both too).
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Callable, Mapping

from broker.heartbeat import SubscriptionData, build_subscription
from store.message import POS_BODY, POS_BODY_LENGTH, decode_properties

Predicate = Callable[[Mapping[str, str] | None], bool]

EXPRESSION_TYPE_TAG = "TAG"
EXPRESSION_TYPE_SQL92 = "SQL92"
COMPILED_CACHE_SIZE = 1024

_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PROPERTY_END = 0x02
_TAGS_KEY = b"TAGS\x01"


def record_properties_bytes(record: memoryview | bytes) -> memoryview:
    """The PROPERTIES field of a stored record (protocol.md §5.2) without decoding anything else."""
    view = memoryview(record)
    (body_len,) = _I32.unpack_from(view, POS_BODY_LENGTH)
    topic_len_pos = POS_BODY + body_len
    topic_len = view[topic_len_pos]
    props_len_pos = topic_len_pos + 1 + topic_len
    (props_len,) = _I16.unpack_from(view, props_len_pos)
    start = props_len_pos + 2
    return view[start : start + max(props_len, 0)]


def record_properties(record: memoryview | bytes) -> dict[str, str]:
    return decode_properties(bytes(record_properties_bytes(record)).decode("utf-8", "replace"))


def record_tags(record: memoryview | bytes) -> bytes | None:
    """The raw TAGS value of a stored record, or None; scans the properties bytes without decoding them."""
    props = bytes(record_properties_bytes(record))
    pos = 0
    while True:
        pos = props.find(_TAGS_KEY, pos)
        if pos < 0:
            return None
        if pos == 0 or props[pos - 1] == _PROPERTY_END:
            start = pos + len(_TAGS_KEY)
            end = props.find(b"\x02", start)
            return props[start:] if end < 0 else props[start:end]
        pos += 1


class TagMessageFilter:
    """A TAG subscription: ``*`` (everything) or a set of tags."""

    __slots__ = ("_all", "_codes", "_tag_bytes", "_tags")

    def __init__(self, sub: SubscriptionData | None) -> None:
        self._all = sub is None or sub.matches_all
        self._codes: frozenset[int] = frozenset() if sub is None else frozenset(sub.code_set)
        self._tags: frozenset[str] = frozenset() if sub is None else frozenset(sub.tags_set)
        self._tag_bytes = frozenset(t.encode("utf-8") for t in self._tags)

    @property
    def matches_all(self) -> bool:
        return self._all

    def tags_code_set(self) -> frozenset[int] | None:
        """For the store's vectorised consume-queue filter; None means every entry is a candidate."""
        return None if self._all else self._codes

    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool:
        if self._all or tags_code is None:
            return True
        # The consume queue stores an int64; upstream compares its low 32 bits as a signed int.
        code = tags_code & 0xFFFFFFFF
        if code >= 0x80000000:
            code -= 0x100000000
        return code in self._codes

    def is_matched_by_commit_log(
        self, record: memoryview | bytes | None, properties: Mapping[str, str] | None = None
    ) -> bool:
        if self._all:
            return True
        if properties is not None:
            return properties.get("TAGS") in self._tags
        if record is None:
            return True
        return record_tags(record) in self._tag_bytes

    def is_matched_by_properties(self, properties: Mapping[str, str] | None) -> bool:
        """For the long-polling wake-up check, which has the arriving message's properties."""
        if self._all or properties is None:
            return True
        return properties.get("TAGS") in self._tags


class ExpressionMessageFilter:
    """A property-filter subscription (SQL92): every consume-queue entry is a candidate.

    It deliberately has no ``tags_code_set``: with one the store would only scan ``maxMsgNums``
    entries ahead, and a selective expression would then answer "no match" after a few entries
    instead of looking further for the next match.
    """

    __slots__ = ("_predicate",)

    def __init__(self, predicate: Predicate) -> None:
        self._predicate = predicate

    @property
    def matches_all(self) -> bool:
        return False

    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool:
        return True

    def is_matched_by_commit_log(
        self, record: memoryview | bytes | None, properties: Mapping[str, str] | None = None
    ) -> bool:
        if properties is None:
            if record is None:
                return True
            properties = record_properties(record)
        return self._predicate(properties)

    def is_matched_by_properties(self, properties: Mapping[str, str] | None) -> bool:
        if properties is None:
            return True
        return self._predicate(properties)


def retry_expression_filter(lookup: Callable[[str], Predicate | None]) -> ExpressionMessageFilter:
    """The filter of a pull from ``%RETRY%<group>`` with ``filterSupportRetry=true`` (upstream's
    ExpressionForRetryMessageFilter): each retried message is matched against the group's SQL92
    subscription to the topic it was first sent to (its RETRY_TOPIC property). A message whose first
    topic the group subscribes to by TAG, or not at all, passes: upstream keeps filter data only for
    SQL92 subscriptions. Without the option the retry topic's own ``*`` subscription lets everything
    through, as upstream's default does.

    ``lookup(real_topic)`` gives the group's compiled SQL92 predicate for that topic, or None."""

    def predicate(properties: Mapping[str, str] | None) -> bool:
        real_topic = properties.get("RETRY_TOPIC") if properties else None
        matches = lookup(real_topic) if real_topic else None
        return True if matches is None else matches(properties)

    return ExpressionMessageFilter(predicate)


def _compile_tag(expression: str) -> Predicate:
    sub = build_subscription("", expression, EXPRESSION_TYPE_TAG)
    flt = TagMessageFilter(sub)
    return lambda properties: flt.is_matched_by_properties(properties or {})


class ExpressionCompiler:
    """``controller.expression_compiler``: (expressionType, expression) → predicate, LRU-cached.

    Raises ValueError (SqlParseError for SQL92) with a message for the client when the expression is
    invalid or its type unknown; the pull and CHECK_CLIENT_CONFIG processors answer that with
    SUBSCRIPTION_PARSE_FAILED.
    """

    def __init__(self, capacity: int = COMPILED_CACHE_SIZE) -> None:
        self._capacity = capacity
        self._cache: OrderedDict[tuple[str, str], Predicate | ValueError] = OrderedDict()
        self.compiled = 0

    def __call__(self, expression_type: str | None, expression: str | None) -> Predicate:
        key = ((expression_type or EXPRESSION_TYPE_TAG).upper(), expression or "")
        cached = self._cache.get(key)
        if cached is None:
            cached = self._compile(*key)
            self._cache[key] = cached
            if len(self._cache) > self._capacity:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        if isinstance(cached, ValueError):
            raise cached
        return cached

    def _compile(self, expression_type: str, expression: str) -> Predicate | ValueError:
        self.compiled += 1
        if expression_type == EXPRESSION_TYPE_SQL92:
            # the SQL92 parser is imported by the first SQL92 subscription, not by every start (issue 15)
            from broker.filter_sql import SqlParseError, compile_sql92

            try:
                return compile_sql92(expression)
            except SqlParseError as exc:
                return exc
        if expression_type == EXPRESSION_TYPE_TAG:
            return _compile_tag(expression)
        return ValueError(f"expression type {expression_type} is not supported; use TAG or SQL92")
