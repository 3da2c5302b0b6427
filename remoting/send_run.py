"""A run of SEND_MESSAGE_V2 frames of one learned layout read straight from a read: one compiled function per layout.

The benchmark Producer's sends arrive several per read, each with the same extFields layout (``remoting.command``'s
``_ExtLayout``: the one-letter keys ``a``..``n`` in one order, values of the same lengths). Frame by frame, each cost
the connection's split, ``RemotingCommand.decode_at`` (the layout's struct, the values, a ``LayoutCommand``), the
send processor's ``groupable`` and the layout's header decoder (``remoting.send_header``): four calls and ~380
bytecodes a send. ``reader(request)`` compiles, once per layout, language and version, one function that does all
of it in one loop (~150 bytecodes a frame): for every following frame of that layout, language and version that is
a plain SEND_MESSAGE_V2 request (not a response, not oneway, no remark) whose values the header decoder's common
path takes (ASCII, every Integer field a small int's canonical text, the booleans "true"/"false", not a batch, the
born timestamp plain digits), it appends the command ``decode_at`` would make, with the header the processor's
``groupable`` would keep on it (``custom_header``), and moves on; at the first frame it does not take it stops and
hands back where, and the connection's general split reads that frame (pinned against the frame-at-a-time path by
tests/remoting/test_send_run.py).

The connection calls it inside a run the dispatcher began (its ``groupable`` took the run's first request, and
``reads_sends(code)`` says its check takes every single send the same way while nothing is dispatched: the send
processor's, whose answer depends on the request code, the fault-injection switch and the batch question), and on a
read's first frame (the check then asked of that request as of any). The generated code is made from fixed names,
the layout's checked keys and numbers; the values it compares with (the layout's skeleton) are in its namespace,
never in its text.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable

from remoting.command import _LANG_NAMES, _ROCKETMQ, LayoutCommand, RemotingCommand, _ExtLayout, _new_command
from remoting.layout_decoder import compile_decoder
from remoting.send_header import (
    _BOOL_TEXTS,
    _BOOLS,
    _INTS,
    _LONG_MAX,
    _REQUIRED,
    _SMALL_INTS,
    _V2_NAMES,
    SendHeaderValues,
    _new_header,
)

SEND_MESSAGE_V2 = 310

#: the number and boolean fields' combinations a reader remembers (cleared when full)
_KNOWN_MAX = 1024
#: readers kept per layout (one per language and version its requests came with)
_READERS_PER_LAYOUT = 8

#: the reader's signature: (buf, pos, size, room, run) -> the position after the frames it took; ``buf`` (bytes) no
#: longer than the connection's frame bound, so that no frame ending in it can be past that bound
RunReader = Callable[[bytes, int, int, int, list], int]


def reader(request: RemotingCommand) -> RunReader | None:
    """The run reader for the frames of ``request``'s layout, language and version (the reader checks both and
    gives the commands them as class attributes: a client sends the same ones with every request), or None when
    the request was not read by a layout, its layout's keys are not a V2 send header's or lie behind a remark, or
    its layout has readers for too many languages and versions already. Compiled the first time it is asked for
    and kept on the layout."""
    layout = request.ext_layout
    if layout is None:
        return None
    readers = layout.run_reader
    if readers is False:  # (not asked yet)
        readers = layout.run_reader = {} if _is_send_layout(layout) else None
    if readers is None:
        return None
    key = (request.language, request.version)
    compiled = readers.get(key, False)
    if compiled is False:
        compiled = readers[key] = _compile(layout, *key) if len(readers) < _READERS_PER_LAYOUT else None
    return compiled  # type: ignore[no-any-return]


def _is_send_layout(layout: _ExtLayout) -> bool:
    keys = layout.keys
    present = set(keys)
    return (
        layout.header_expected is not None
        and present <= _V2_NAMES.keys()
        and _REQUIRED <= present
        and len(present) == len(keys)
    )


def _compile(layout: _ExtLayout, language: str, version: int) -> RunReader | None:
    if language not in _LANG_NAMES or not -(2**15) <= version < 2**15:
        return None  # (not what a frame's header gives: no frame would match)
    keys = layout.keys
    present = set(keys)
    whole: struct.Struct = layout.header_unpack_from.__self__  # type: ignore[attr-defined]
    hlen = whole.size  # the whole header: fixed part, remark and extFields lengths, every field
    # The frame from its length word, in one struct call: the length, then the header word, the code, the language
    # and the version as one ``9s`` field, the opaque, then the flag and the layout's first ``s`` field (remark
    # length, extFields length, the first key's skeleton) as one ``s`` field, then the other fields' skeletons:
    # everything but the length and the opaque (and the values, skipped) compared in two compares.
    fields = whole.format.lstrip(">")
    assert fields.startswith("hbhii")
    first_size, rest = fields[len("hbhii") :].split("s", 1)
    frame = struct.Struct(f">I9si{4 + int(first_size)}s{rest}")
    head = struct.pack(
        ">IhBh", (_ROCKETMQ << 24) | hlen, SEND_MESSAGE_V2, _LANG_NAMES.index(language), version
    )  # (the first number with that language's name; another number with it is left to the general path)
    expected = (b"\0\0\0\0" + layout.header_expected[0], *layout.header_expected[1:])  # (flag 0: a plain request)
    # The number and boolean fields: a producer sends the same few texts over and over (a queue id among a few, the
    # same flags), so their conversion is looked up whole, by the tuple of their texts (one ``itemgetter`` call
    # and one dict lookup), in a table of the combinations seen (``_known``); a combination not seen goes through
    # ``convert``: each text a small int's canonical text or a boolean's, not a batch, else None (the general
    # path decodes it). The header is then one ``itemgetter`` over the values, the converted fields and the born
    # timestamp, in ``SendMessageRequestHeader``'s order, made a ``SendHeaderValues`` in one C call.
    # the values' slices in the frame (the layout's are in the header, 8 bytes on)
    value_slices = layout.values.__reduce__()[1]
    local = {key: f"v_{key}" for key in keys}
    index = {key: i for i, key in enumerate(keys)}
    born_length = value_slices[index["g"]].stop - value_slices[index["g"]].start
    converted = [k for k in (*_INTS, *_BOOLS)]  # the converted tuple's fields, absent ones as their default
    assert converted == ["d", "e", "f", "h", "j", "l", "k", "m"]
    text_keys = [k for k in converted if k in present]
    defaults = {"j": "None", "l": "None", "k": "False", "m": "False"}
    nv = len(keys)
    # (values, then the converted fields, then None for an absent str field, then the born timestamp)
    picks = []
    for k in _V2_NAMES:
        if k in converted:
            picks.append(nv + converted.index(k))
        elif k == "g":
            picks.append(nv + len(converted) + 1)
        elif k in present:
            picks.append(index[k])
        else:  # i or n absent: None
            picks.append(nv + len(converted))
    convert_lines = [
        "def decode(values):",
        f"    {', '.join(local[k] for k in keys)}, = values",
        "    try:",
        *(f"        {local[k]} = _small[{local[k]}]" for k in _INTS if k in present),
        *(f"        {local[k]} = _bools[{local[k]}]" for k in _BOOLS if k in present),
        "    except KeyError:",
        "        return None",
        *(["    if v_m:", "        return None"] if "m" in present else []),  # a batch: not read here
        f"    conv = ({', '.join(local[k] if k in present else defaults[k] for k in converted)}, None)",
        f"    if len(_known) >= {_KNOWN_MAX}:",
        "        _known.clear()",
        "    _known[_texts(values)] = conv",
        "    return conv",
    ]
    known: dict[tuple[str, ...], tuple[object, ...]] = {}
    texts = operator.itemgetter(*(index[k] for k in text_keys))  # (d, e, f, h present: a tuple)
    convert = compile_decoder(
        convert_lines, {"_small": _SMALL_INTS, "_bools": _BOOL_TEXTS, "_known": known, "_texts": texts, "len": len}
    )
    lines = [
        "def decode(buf, pos, size, room, run):",
        "    for _ in _range(room - len(run)):",
        f"        if size - pos < {frame.size}:",
        "            break",
        "        f = _unpack(buf, pos)",
        # the header word (ROCKETMQ, this header's length) and the code; the flag (a plain request: 0), no remark,
        # the extFields length and every field's skeleton
        "        if f[1] != _head or f[3:] != _expected:",
        "            break",
        "        length = f[0]",
        "        end = pos + 4 + length",
        # (no frame past the connection's frame bound: the caller reads only a buffer shorter than that bound)
        f"        if end > size or length < {4 + hlen}:",
        "            break",
        f"        hend = pos + {8 + hlen}",
        "        values = _values(buf[pos:hend].decode('latin-1'))",
        "        if not ''.join(values).isascii():",
        "            break",
        "        conv = _known_get(_texts(values))",
        "        if conv is None:",
        "            conv = _convert(values)",
        "            if conv is None:",
        "                break",
        f"        born = values[{index['g']}]",
        "        if not born.isdigit():",  # (ASCII: all the values are)
        "            break",
        "        born = int(born)",
        # (a Long: the layout's value length says whether a plain number can be out of its range)
        *([f"        if born > {_LONG_MAX}:", "            break"] if born_length > 18 else []),
        # the command decode_at makes, with the header groupable would keep on it (the fields every command of this
        # reader has alike are its class's: see _command_class)
        "        cmd = _new(_Cmd)",
        "        cmd.opaque = f[2]",
        "        cmd.body = buf[hend:end] if end > hend else None",
        "        cmd.ext_values = values",
        "        cmd.custom_header = _new_header(_Hdr, _order(values + conv + (born,)))",
        "        run.append(cmd)",
        "        pos = end",
        "    return pos",
    ]
    namespace = {
        "_unpack": frame.unpack_from,
        "_expected": expected,
        "_head": head,
        "_values": operator.itemgetter(*(slice(v.start + 8, v.stop + 8) for v in value_slices)),
        "_known_get": known.get,
        "_texts": texts,
        "_convert": convert,
        "_order": operator.itemgetter(*picks),
        "_new": _new_command,
        "_Cmd": _command_class(layout, language, version),
        "_new_header": _new_header,
        "_Hdr": SendHeaderValues,
        "_range": range,
        "len": len,
        "int": int,
    }
    return compile_decoder(lines, namespace)  # type: ignore[return-value]


def _command_class(layout: _ExtLayout, language: str, version: int) -> type[LayoutCommand]:
    """The class of the commands a reader makes: a ``LayoutCommand`` whose code, flag, remark, serialization, layout,
    language and version (the same for every command it makes: a plain SEND_MESSAGE_V2 request without a remark,
    ROCKETMQ, this layout, the language and version it checks) are class attributes over the dataclass's slots, so
    that the reader stores 4 fields a send instead of 11. They read as the dataclass's fields do; nothing writes them on a request a connection read
    (the broker reads a request's fields; only ``custom_header`` and ``ext_fields`` are set, and those stay slots)."""
    return type(
        "SendRunCommand",
        (LayoutCommand,),
        {
            "__slots__": (),
            "__doc__": "A SEND_MESSAGE_V2 request read by a layout's run reader (remoting.send_run).",
            "code": SEND_MESSAGE_V2,
            "flag": 0,
            "remark": None,
            "serialize_type": _ROCKETMQ,
            "ext_layout": layout,
            "language": language,
            "version": version,
        },
    )
