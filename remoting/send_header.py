"""SEND_MESSAGE_V2's header decoded straight from the values of a ROCKETMQ request whose extFields a learned layout
read (``RemotingCommand.ext_layout`` / ``ext_values``): no map lookups, no type checks (the layout's values are
ASCII str), one decoder compiled per layout.

The benchmark Producer's sends all come with one layout (the one-letter keys ``a``..``n`` in one order), so one
compiled function decodes them all: the values unpacked in the layout's order, the digits of every number field
checked with one ``isdigit``, their range with one ``max``, the header built positionally. Anything else (a field
missing, a sign, an empty or out-of-range number) gives None and the caller decodes the map with
``decode_send_message_v2``, which returns the same header or raises the precise error (pinned by
tests/remoting/test_send_header.py).
"""

from __future__ import annotations

from collections.abc import Callable

from remoting.headers import SendMessageRequestHeader
from remoting.layout_decoder import LayoutDecoders, compile_decoder, number_lines

# SendMessageRequestHeaderV2's one-letter wire names → SendMessageRequestHeader's fields, in that header's order
_V2_NAMES = {
    "a": "producer_group",
    "b": "topic",
    "c": "default_topic",
    "d": "default_topic_queue_nums",
    "e": "queue_id",
    "f": "sys_flag",
    "g": "born_timestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsume_times",
    "k": "unit_mode",
    "m": "batch",
    "l": "max_reconsume_times",
    "n": "broker_name",
}
_REQUIRED = frozenset("abcdefgh")
_INTS = ("d", "e", "f", "h", "j", "l")  # Java Integer fields; "g" is a Long
_BOOLS = ("k", "m")
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


def _compile(keys: tuple[str, ...]) -> Callable[[tuple[str, ...]], SendMessageRequestHeader | None] | None:
    """Straight-line code for one layout's keys; None when they are not a V2 send header's (a key other than
    ``a``..``n``, or a required one missing)."""
    present = set(keys)
    if not present <= _V2_NAMES.keys() or not _REQUIRED <= present or len(present) != len(keys):
        return None
    ns: dict[str, object] = {"_cls": SendMessageRequestHeader, "int": int, "max": max}
    local = {key: f"v_{key}" for key in keys}
    numbers = [k for k in "defghjl" if k in present]
    ints = [local[k] for k in _INTS if k in present]
    lines = [
        "def decode(values):",
        f"    {', '.join(local[k] for k in keys)}, = values",
        *number_lines([local[k] for k in numbers]),
        f"    if max({', '.join(ints)}) > {_INT_MAX} or {local['g']} > {_LONG_MAX}: return None",
    ]
    lines += [f"    {local[k]} = {local[k]}.lower() == 'true'" for k in _BOOLS if k in present]
    defaults = {"i": "None", "j": "None", "k": "False", "m": "False", "l": "None", "n": "None"}
    args = [local.get(k, defaults.get(k)) for k in _V2_NAMES]
    lines.append(f"    return _cls({', '.join(args)})")
    return compile_decoder(lines, ns)


_DECODERS: LayoutDecoders[SendMessageRequestHeader] = LayoutDecoders(_compile)

#: The send header of a V2 request whose extFields are ``keys`` → ``values`` (a learned layout's), or None when
#: the fast decode does not apply: then decode the map with ``decode_send_message_v2``.
decode_send_message_v2_values = _DECODERS.decode
