"""PULL_MESSAGE's header decoded straight from the values of a ROCKETMQ request whose extFields a learned layout
read (``RemotingCommand.ext_layout`` / ``ext_values``): no map lookups, no type checks (the layout's values are
ASCII str), one decoder compiled per layout.

A consumer's pulls keep one layout while the lengths of their values stay put: queue id, max count, flags,
suspend timeout and subscription version do not change from pull to pull, and the two offsets only change length
when they gain a digit (a queue's pulls go 9,999 → 10,000 once), so a caught-up consumer's pulls of one queue are
read by one layout for millions of messages; queues whose offsets have different lengths take a few layouts. The
compiled function unpacks the values in the layout's order (keys the header does not read, such as ACL's
``AccessKey``/``Signature``, are unpacked and ignored, as the map decoder ignores them), checks the digits of all
seven number fields with one ``isdigit``, their range with two compares of their bitwise or, and builds the header as a
``PullHeaderValues`` tuple in one C call (a caught-up consumer's every message is one pull, decoded once: the slotted
dataclass's ``__init__`` stored its 11 fields one by one, ~100 bytecodes a pull). Anything else (a required field missing, a sign, an empty or out-of-range number) gives None and the caller decodes
the map with ``decode_header``, which returns the same header or raises the precise error (pinned by
tests/remoting/test_pull_header.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from remoting.headers import PullMessageRequestHeader
from remoting.layout_decoder import LayoutDecoders, compile_decoder, number_lines

# PullMessageRequestHeader's wire names, in its fields' order (the positional arguments of its constructor)
_FIELDS = (
    "consumerGroup",
    "topic",
    "queueId",
    "queueOffset",
    "maxMsgNums",
    "sysFlag",
    "commitOffset",
    "suspendTimeoutMillis",
    "subVersion",
    "subscription",
    "expressionType",
)


class PullHeaderValues(NamedTuple):
    """PullMessageRequestHeader's fields, by its names and in its order, as the layout decoders build it: a tuple
    made in one C call (``tuple.__new__``). The pull processor only reads a header's fields, so either serves it
    (it also keys its cache of checked pulls by some of them); it compares equal to the
    ``PullMessageRequestHeader`` of the same fields (what the differential tests compare)."""

    consumer_group: str
    topic: str
    queue_id: int
    queue_offset: int
    max_msg_nums: int
    sys_flag: int
    commit_offset: int
    suspend_timeout_millis: int
    sub_version: int
    subscription: str | None = None
    expression_type: str | None = None

    def __eq__(self, other: Any) -> bool:  # type: ignore[override]
        if other.__class__ is PullMessageRequestHeader:
            return tuple(self) == tuple(getattr(other, name) for name in self._fields)
        return tuple.__eq__(self, other)

    def __ne__(self, other: Any) -> bool:  # type: ignore[override]
        return not self == other

    __hash__ = tuple.__hash__


assert PullHeaderValues._fields == PullMessageRequestHeader.__match_args__  # (the same names, in the same order)
_new_header = tuple.__new__
_OPTIONAL = frozenset(("subscription", "expressionType"))  # absent: None
_INTS = ("queueId", "maxMsgNums", "sysFlag")  # Java Integer fields
_LONGS = ("queueOffset", "commitOffset", "suspendTimeoutMillis", "subVersion")  # Java Long fields
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


def _compile(keys: tuple[str, ...]) -> Callable[[tuple[str, ...]], PullHeaderValues | None] | None:
    """Straight-line code for one layout's keys; None when a required field of the pull header is not among
    them (or a key is there twice, which a learned layout never has)."""
    present = set(keys)
    if len(present) != len(keys) or not present >= set(_FIELDS) - _OPTIONAL:
        return None
    local = {key: f"v{i}" for i, key in enumerate(keys)}  # (a key the header does not read is unpacked unused)
    ints = ", ".join(local[k] for k in _INTS)
    longs = ", ".join(local[k] for k in _LONGS)
    numbers = [local[k] for k in _FIELDS if k in _INTS or k in _LONGS]
    lines = [
        "def decode(values):",
        f"    {', '.join(local.values())}, = values",
        *number_lines(numbers),
        # (non-negative ints: one of them is out of range exactly when their bitwise or is)
        f"    if {ints.replace(', ', ' | ')} > {_INT_MAX} or {longs.replace(', ', ' | ')} > {_LONG_MAX}: return None",
        f"    return _new(_cls, ({', '.join(local.get(k, 'None') for k in _FIELDS)},))",  # (one C call)
    ]
    ns: dict[str, object] = {"_cls": PullHeaderValues, "_new": _new_header, "int": int}
    return compile_decoder(lines, ns)


_DECODERS: LayoutDecoders[PullHeaderValues] = LayoutDecoders(_compile)

#: The pull header of a request whose extFields are ``keys`` → ``values`` (a learned layout's), or None when the
#: fast decode does not apply: then decode the map with ``decode_header(PullMessageRequestHeader, ...)``.
decode_pull_message_values = _DECODERS.decode
