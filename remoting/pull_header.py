"""PULL_MESSAGE's header decoded straight from the values of a ROCKETMQ request whose extFields a learned layout
read (``RemotingCommand.ext_layout`` / ``ext_values``): no map lookups, no type checks (the layout's values are
ASCII str), one decoder compiled per layout.

A consumer's pulls keep one layout while the lengths of their values stay put: queue id, max count, flags,
suspend timeout and subscription version do not change from pull to pull, and the two offsets only change length
when they gain a digit (a queue's pulls go 9,999 → 10,000 once), so a caught-up consumer's pulls of one queue are
read by one layout for millions of messages; queues whose offsets have different lengths take a few layouts. The
compiled function unpacks the values in the layout's order (keys the header does not read, such as ACL's
``AccessKey``/``Signature``, are unpacked and ignored, as the map decoder ignores them), checks the digits of all
seven number fields with one ``isdigit``, their range with two ``max``, and builds the header positionally.
Anything else (a required field missing, a sign, an empty or out-of-range number) gives None and the caller decodes
the map with ``decode_header``, which returns the same header or raises the precise error (pinned by
tests/remoting/test_pull_header.py).
"""

from __future__ import annotations

from collections.abc import Callable

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
_OPTIONAL = frozenset(("subscription", "expressionType"))  # absent: None
_INTS = ("queueId", "maxMsgNums", "sysFlag")  # Java Integer fields
_LONGS = ("queueOffset", "commitOffset", "suspendTimeoutMillis", "subVersion")  # Java Long fields
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


def _compile(keys: tuple[str, ...]) -> Callable[[tuple[str, ...]], PullMessageRequestHeader | None] | None:
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
        f"    if max({ints}) > {_INT_MAX} or max({longs}) > {_LONG_MAX}: return None",
        f"    return _cls({', '.join(local.get(k, 'None') for k in _FIELDS)})",
    ]
    ns: dict[str, object] = {"_cls": PullMessageRequestHeader, "int": int, "max": max}
    return compile_decoder(lines, ns)


_DECODERS: LayoutDecoders[PullMessageRequestHeader] = LayoutDecoders(_compile)

#: The pull header of a request whose extFields are ``keys`` → ``values`` (a learned layout's), or None when the
#: fast decode does not apply: then decode the map with ``decode_header(PullMessageRequestHeader, ...)``.
decode_pull_message_values = _DECODERS.decode
