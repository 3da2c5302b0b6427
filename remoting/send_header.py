"""SEND_MESSAGE_V2's header decoded straight from the values of a ROCKETMQ request whose extFields a learned layout
read (``RemotingCommand.ext_layout`` / ``ext_values``): no map lookups, no type checks (the layout's values are
ASCII str), one decoder compiled per layout.

The benchmark Producer's sends all come with one layout (the one-letter keys ``a``..``n`` in one order), so one
compiled function decodes them all: the values unpacked in the layout's order, the Integer fields and booleans
looked up in tables of their common texts (small ints such as a queue id or "16", "true", "false": a subscript
each where ``int()`` is a call), the born timestamp checked and converted, the header made as a ``SendHeaderValues``
tuple in one C call (the send processor reads its fields by ``SendMessageRequestHeader``'s names). Other
values go to a second compiled function: the digits of every number field checked with one ``isdigit``, their
range with one ``max``, ``int()`` each. Anything else (a field missing, a sign, an empty or out-of-range number)
gives None and the caller decodes the map with ``decode_send_message_v2``, which returns the same header or raises
the precise error (pinned by tests/remoting/test_send_header.py). ``single_send_v2_values`` is the same decoder
with the send processor's ``groupable`` batch question as its first line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

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


class SendHeaderValues(NamedTuple):
    """SendMessageRequestHeader's fields, by its names and in its order, as the layout decoders build it: a tuple
    made in one C call (``tuple.__new__``) where the slotted dataclass's ``__init__`` stores 14 fields one by one
    (44 bytecodes a send). The send processor only reads a header's fields, so either serves it; it compares equal
    to the ``SendMessageRequestHeader`` of the same fields (what the differential tests compare)."""

    producer_group: str
    topic: str
    default_topic: str
    default_topic_queue_nums: int
    queue_id: int
    sys_flag: int
    born_timestamp: int
    flag: int
    properties: str | None = None
    reconsume_times: int | None = None
    unit_mode: bool = False
    batch: bool = False
    max_reconsume_times: int | None = None
    broker_name: str | None = None

    def __eq__(self, other: Any) -> bool:  # type: ignore[override]
        if other.__class__ is SendMessageRequestHeader:
            return tuple(self) == tuple(getattr(other, name) for name in self._fields)
        return tuple.__eq__(self, other)

    def __ne__(self, other: Any) -> bool:  # type: ignore[override]
        return not self == other

    __hash__ = tuple.__hash__


assert SendHeaderValues._fields == SendMessageRequestHeader.__match_args__  # (the same names, in the same order)
_new_header = tuple.__new__
_INTS = ("d", "e", "f", "h", "j", "l")  # Java Integer fields; "g" is a Long
_BOOLS = ("k", "m")
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1


# the canonical text of small ints (queue ids, queue counts, flags, reconsume times: what a client sends over and
# over) → the int, and the two booleans' canonical texts: one dict subscript each instead of an ``int()`` call
_SMALL_INTS = {str(i): i for i in range(256)}  # (~25 KB: the idle memory budget counts)
_BOOL_TEXTS = {"true": True, "false": False}


def _compile(
    keys: tuple[str, ...], single: bool = False
) -> Callable[[tuple[str, ...]], SendHeaderValues | bool | None] | None:
    """Straight-line code for one layout's keys; None when they are not a V2 send header's (a key other than
    ``a``..``n``, or a required one missing). Two functions: the common values (every Integer field a small int's
    canonical text, every boolean "true" or "false") read by subscripts; any other value hands the values to
    the general one, which converts each number with ``int()`` after one digits check. ``single``: the first
    answers False for a batch (see ``_compile_single``) before it decodes anything."""
    present = set(keys)
    if not present <= _V2_NAMES.keys() or not _REQUIRED <= present or len(present) != len(keys):
        return None
    local = {key: f"v_{key}" for key in keys}
    numbers = [k for k in "defghjl" if k in present]
    ints = [local[k] for k in _INTS if k in present]
    bools = [local[k] for k in _BOOLS if k in present]
    unpack = f"    {', '.join(local[k] for k in keys)}, = values"
    defaults = {"i": "None", "j": "None", "k": "False", "m": "False", "l": "None", "n": "None"}
    args = [local.get(k, defaults.get(k)) for k in _V2_NAMES]
    build = f"    return _new(_cls, ({', '.join(args)},))"  # (one C call: see SendHeaderValues)
    general_lines = [
        "def decode(values):",
        unpack,
        *number_lines([local[k] for k in numbers]),
        f"    if max({', '.join(ints)}) > {_INT_MAX} or {local['g']} > {_LONG_MAX}: return None",
        *(f"    {name} = {name}.lower() == 'true'" for name in bools),
        build,
    ]
    general = compile_decoder(general_lines, {"_cls": SendHeaderValues, "_new": _new_header, "int": int, "max": max})
    g = local["g"]
    common_lines = [
        "def decode(values):",
        unpack,
        *([f"    if {local['m']} and {local['m']} != 'false': return False"] if single and "m" in present else []),
        "    try:",
        *(f"        {name} = _small[{name}]" for name in ints),
        *(f"        {name} = _bools[{name}]" for name in bools),
        "    except KeyError:",
        "        return _general(values)",
        f"    if not ({g}.isdigit() and {g}.isascii()): return None",  # (the Long: a born timestamp)
        f"    {g} = int({g})",
        f"    if {g} > {_LONG_MAX}: return None",
        build,
    ]
    namespace = {
        "_cls": SendHeaderValues,
        "_new": _new_header,
        "int": int,
        "_small": _SMALL_INTS,
        "_bools": _BOOL_TEXTS,
        "_general": general,
    }
    return compile_decoder(common_lines, namespace)


_DECODERS: LayoutDecoders[SendHeaderValues] = LayoutDecoders(_compile)

#: The send header of a V2 request whose extFields are ``keys`` → ``values`` (a learned layout's), or None when
#: the fast decode does not apply: then decode the map with ``decode_send_message_v2``.
decode_send_message_v2_values = _DECODERS.decode


def _compile_single(keys: tuple[str, ...]) -> Callable[[tuple[str, ...]], SendHeaderValues | bool | None] | None:
    """The send processor's ``groupable`` question for one layout's keys, with the header: False when the batch flag
    ``m`` says batch (set, not empty, not "false": ``groupable``'s own rule on the map), else the header as
    ``decode_send_message_v2_values`` gives it (None: decode the map). A V2 layout has no V1 ``batch`` key (its keys
    are ``a``..``n``), so ``m`` alone answers the question, and no C++ batch flag ("1" under ``batch``) can be there.
    The question is the first line of the header's own decoder (one call a send)."""
    return _compile(keys, single=True)


_SINGLE_DECODERS: LayoutDecoders[SendHeaderValues | bool] = LayoutDecoders(_compile_single)

#: For SEND_MESSAGE_V2 extFields ``keys`` → ``values`` (a learned layout's): False when the request is a batch by
#: the send processor's ``groupable`` rule, else its header as ``decode_send_message_v2_values`` gives it (None:
#: the fast decode does not apply, ask the map).
single_send_v2_values = _SINGLE_DECODERS.decode
