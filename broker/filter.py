"""Message filters handed to the store: tag codes on the consume-queue column, then an exact check.

The consume queue holds a 32-bit hash of the TAGS property; two tags can share a hash, so a tag match
there is only a candidate. The exact check on the stored TAGS (and SQL92 property filters, when
enabled) runs on the commit-log record's properties — clients re-filter by tag string anyway, but
they never see what the broker wrongly withheld, so only over-matching is allowed at the first stage.
"""

from __future__ import annotations

from typing import Callable

from broker.heartbeat import SubscriptionData


class TagMessageFilter:
    __slots__ = ("_codes", "_tags", "_all", "codes_array")

    def __init__(self, sub: SubscriptionData | None) -> None:
        self._all = sub is None or sub.matches_all
        self._codes = frozenset() if sub is None else frozenset(sub.code_set)
        self._tags = frozenset() if sub is None else frozenset(sub.tags_set)
        # The store filters the tag column vectorised with numpy.isin over these codes.
        self.codes_array = None if self._all else sorted(self._codes)

    @property
    def matches_all(self) -> bool:
        return self._all

    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool:
        if self._all or tags_code is None:
            return True
        # The consume queue stores an int64; the hash is the low 32 bits as a signed int.
        code = tags_code & 0xFFFFFFFF
        if code >= 0x80000000:
            code -= 0x100000000
        return code in self._codes

    def is_matched_by_commit_log(self, properties: dict[str, str] | None) -> bool:
        if self._all or properties is None:
            return True
        return properties.get("TAGS") in self._tags

    def is_matched_by_properties(self, properties: dict[str, str] | None) -> bool:
        return self.is_matched_by_commit_log(properties)


class ExpressionMessageFilter(TagMessageFilter):
    """SQL92 property filter: every tag code is a candidate, the expression decides on properties."""

    __slots__ = ("_predicate",)

    def __init__(self, predicate: Callable[[dict[str, str]], bool]) -> None:
        super().__init__(None)
        self._predicate = predicate
        self._all = False
        self.codes_array = None

    def is_matched_by_consume_queue(self, tags_code: int | None) -> bool:
        return True

    def is_matched_by_commit_log(self, properties: dict[str, str] | None) -> bool:
        if properties is None:
            return True
        return self._predicate(properties)
