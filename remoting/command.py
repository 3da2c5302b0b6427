"""``RemotingCommand``: one request or response, and its JSON / ROCKETMQ header encode and decode.

Frame layout (protocol §1), the 4-byte total length is handled by ``remoting.frame``::

    int32 headerLenAndType (type << 24 | header length) | header bytes | body

Inbound, the header length is masked with 0xFFFFFF (J semantics) and every extFields value is
normalised to ``str`` because C and N send JSON numbers and booleans there. Outbound, extFields
values are always strings: C silently reads a non-string as 0 and G cannot decode the frame at all.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from remoting.codes import LanguageCode
from remoting.errors import RemotingCommandError

FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2

# J MQVersion.Version.V4_9_8.ordinal(): what a 4.9.8 broker puts in its responses.
DEFAULT_VERSION = 409

_HEAD = struct.Struct(">II")  # total length, headerLenAndType
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
# code int16, language int8, version int16, opaque int32, flag int32 (RocketMQSerializable)
_BIN_FIXED = struct.Struct(">hbhii")

_JSON = 0  # SerializeType values as plain ints: enum attribute lookups cost on the hot path
_ROCKETMQ = 1
_SERIALIZE_NAMES = ("JSON", "ROCKETMQ")
_LANG_BY_NUMBER = {lc.value: lc.name for lc in LanguageCode}
_LANG_NUMBER = {lc.name: lc.value for lc in LanguageCode}
#: the language of a ROCKETMQ header's int8 (-128..127, a negative one indexing from the end): _LANG_BY_NUMBER's
#: name, else "OTHER"
_LANG_NAMES = tuple(_LANG_BY_NUMBER.get(n if n < 128 else n - 256, "OTHER") for n in range(256))


def _ext_value_to_str(value: Any) -> str | None:
    """J coerces extFields into Map<String,String>; mirror that for values C/N send untyped."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return str(value)
    # Nested objects/arrays: keep their JSON text so nothing is silently lost.
    return orjson.dumps(value).decode()


_KEY_BYTES: dict[object, bytes] = {}
_KEY_BYTES_MAX = 1024  # keys come from header declarations; a peer cannot make this grow (only we encode)
_NO_REMARK = b"\0\0\0\0"
_pack_i32 = _I32.pack


def _key_bytes(key: object) -> bytes:
    """An extFields key as the ROCKETMQ header writes it: int16 length + UTF-8 bytes (cached)."""
    kb = (key if isinstance(key, str) else str(key)).encode()
    prefixed = _I16.pack(len(kb)) + kb
    if len(_KEY_BYTES) < _KEY_BYTES_MAX:
        _KEY_BYTES[key] = prefixed
    return prefixed


_STR_ONLY = frozenset((str,))


def _normalise_ext(ext: dict[str, Any]) -> dict[str, str]:
    if _STR_ONLY.issuperset(map(type, ext.values())):  # (one pass in C)
        return ext  # the common case (J, G, our own client): already str → str, no copy
    out: dict[str, str] = {}
    for key, value in ext.items():
        text = value if type(value) is str else _ext_value_to_str(value)
        if text is not None:
            out[key] = text
    return out


def _outbound_ext(ext: dict[str, str]) -> dict[str, str]:
    if _STR_ONLY.issuperset(map(type, ext.values())):
        return ext
    out: dict[str, str] = {}
    for key, value in ext.items():
        text = value if isinstance(value, str) else _ext_value_to_str(value)
        if text is not None:
            out[str(key)] = text
    return out


_U16 = struct.Struct(">H")


def _binary_ext_fast(header: bytes, pos: int, end: int) -> dict[str, str] | None:
    """The ROCKETMQ extFields ``header[pos:end]`` (int16 key length, key, int32 value length, value, ...) when
    every length is in bounds and every key and value ASCII (the common request), else None: then
    ``_binary_ext`` decodes them with a check per field and gives the same map or the precise error.

    Why it may skip the per-field checks: lengths read unsigned only ever move ``pos`` forward, so a length
    that is negative for ``_binary_ext`` or runs past ``end`` leaves ``pos`` past ``end`` (or past the header:
    ``struct.error``); the loop ends exactly at ``end`` only when every field lies within it. Keys and values
    are sliced from one latin-1 view and checked ASCII together at the end (two joins in C); their lengths
    must add up to the fields' bytes, so a key sent twice (whose first value the map no longer holds, maybe
    not even UTF-8) takes the checked path too, and the keys together must fit an int16, so no key length read
    unsigned was negative as J's int16."""
    start = pos
    text = header.decode("latin-1")
    ext: dict[str, str] = {}
    unpack_u16 = _U16.unpack_from
    unpack_u32 = _U32.unpack_from
    try:
        while pos < end:
            kstart = pos + 2
            kend = kstart + unpack_u16(header, pos)[0]
            vstart = kend + 4
            pos = vstart + unpack_u32(header, kend)[0]
            ext[text[kstart:kend]] = text[vstart:pos]
    except struct.error:
        return None
    if pos != end:
        return None
    keys = "".join(ext)
    values = "".join(ext.values())
    if (
        len(keys) + len(values) + 6 * len(ext) != end - start
        or len(keys) > 0x7FFF  # a key length that is negative as J's int16 (so no key that long here)
        or not (keys.isascii() and values.isascii())
    ):
        return None
    return ext


class _ExtLayout:
    """The byte layout of one extFields seen before: where each field starts, its key and its value's length.

    A client sends the same fields in the same order with values of the same lengths request after request (the
    benchmark Producer's SEND_MESSAGE_V2: 14 one-letter fields, only queue id, timestamp and UNIQ_KEY change), so
    the next request of that length is read with one ``struct`` call that checks every key length, key and value
    length against this layout (its values skipped) and one ``itemgetter`` of the values' slices, instead of
    ~50 bytecodes a field. A layout is only learned from a map ``_binary_ext_fast`` decoded (every key distinct,
    every key and value ASCII), so a header whose skeleton matches it and whose values are ASCII is the one the
    fast loop would read the same way: same fields, same slices."""

    __slots__ = (
        "pos",
        "keys",
        "expected",
        "unpack",
        "values",
        "header_unpack",
        "header_unpack_from",
        "header_expected",
        "run_reader",
    )

    def __init__(self, ext: dict[str, str], pos: int) -> None:
        # Each field's skeleton (int16 key length, key, int32 value length: contiguous bytes) is read as one ``s``
        # field and compared as bytes (one memcmp each, where three values each were made and compared); the
        # values are skipped (``x``) and sliced by ``values``.
        fmt = [">"]
        expected: list[bytes] = []
        slices = []
        at = pos
        for key, value in ext.items():
            kb = key.encode()
            fmt.append(f"{6 + len(kb)}s{len(value)}x")
            expected.append(_U16.pack(len(kb)) + kb + _U32.pack(len(value)))
            at += 6 + len(kb)
            slices.append(slice(at, at + len(value)))
            at += len(value)
        self.pos = pos
        self.keys = tuple(ext)
        self.expected = tuple(expected)
        self.unpack = struct.Struct("".join(fmt)).unpack_from
        self.values = operator.itemgetter(*slices)  # (two fields at least: one would give the value, not a tuple)
        # The whole header of a request without a remark (extFields at _NO_REMARK_EXT): fixed part, then the remark
        # length, the extFields length and the first field's skeleton as one ``s`` field, then the other fields', in
        # one struct call; what follows the fixed part's five values must be ``header_expected`` (see
        # ``RemotingCommand.decode_at``). Other layouts (behind a remark) never match there.
        if pos == _NO_REMARK_EXT:
            first = _NO_REMARK + _U32.pack(at - pos) + expected[0]
            whole = struct.Struct(f">hbhii{len(first)}s" + fmt[1].split("s", 1)[1] + "".join(fmt[2:]))
            self.header_unpack = whole.unpack
            self.header_unpack_from = whole.unpack_from
            self.header_expected: tuple[object, ...] | None = (first, *expected[1:])
        else:
            self.header_unpack = _no_fields
            self.header_unpack_from = _no_fields_at
            self.header_expected = None
        # the readers of runs of SEND_MESSAGE_V2 frames of this layout (``remoting.send_run.reader``): False until
        # first asked for, then {(language, version): the compiled reader, or None}, or None when this is not a V2
        # send header's layout
        self.run_reader: dict[tuple[str, int], Callable[..., int] | None] | None | bool = False


_NO_REMARK_EXT = _BIN_FIXED.size + 8  # where the extFields start in a ROCKETMQ header without a remark


_NO_REMARK_WORD = (_ROCKETMQ << 24) | _NO_REMARK_EXT  # a ROCKETMQ header word less this: the length after the remark


def _no_fields(header: bytes) -> tuple[()]:
    return ()


def _no_fields_at(buf: bytes, offset: int) -> tuple[()]:
    return ()


_LAYOUTS: dict[int, tuple[_ExtLayout, ...]] = {}  # extFields length → the layouts learned for it, oldest first
_LAYOUT_MISSES: set[int] = set()  # lengths that missed once since their last layout was learned
_LAYOUTS_MAX = 256  # lengths remembered; a peer sending ever new lengths costs a cleared table now and then
_LAYOUTS_PER_LENGTH = 4  # requests of other kinds may share a length: the first ones learned keep theirs


def _match_layout(header: bytes, pos: int, end: int) -> tuple[_ExtLayout, tuple[str, ...]] | None:
    """A layout learned for the length of the extFields ``header[pos:end]`` that they match (see ``_ExtLayout``),
    and their values in its order; else None, and ``_binary_ext_fast`` reads them."""
    for layout in _LAYOUTS.get(end - pos, ()):
        if layout.pos == pos and layout.unpack(header, pos) == layout.expected:
            values = layout.values(header.decode("latin-1"))
            if not "".join(values).isascii():
                return None
            return layout, values
    return None


def _binary_ext_layout(header: bytes, pos: int, end: int) -> dict[str, str] | None:
    """The extFields as the matching layout reads them (None: no layout matches)."""
    match = _match_layout(header, pos, end)
    return None if match is None else dict(zip(match[0].keys, match[1]))


def _learn_layout(ext: dict[str, str], pos: int, end: int) -> None:
    """Remember the layout of extFields that ``_binary_ext_fast`` decoded and no layout matched, the second time
    their length misses (a length seen once may never come back: no struct compiled for it). A length keeps the
    first few layouts learned for it until the table is cleared: requests of one length whose layout changes every
    time (learning one costs ~10 µs, a read ~6 µs) stop being learned instead of being learned every other time."""
    elen = end - pos
    known = _LAYOUTS.get(elen, ())
    if len(known) >= _LAYOUTS_PER_LENGTH:
        return
    if elen not in _LAYOUT_MISSES:
        if len(_LAYOUT_MISSES) >= _LAYOUTS_MAX:
            _LAYOUT_MISSES.clear()
        _LAYOUT_MISSES.add(elen)
        return
    _LAYOUT_MISSES.discard(elen)
    if not known and len(_LAYOUTS) >= _LAYOUTS_MAX:
        _LAYOUTS.clear()
    _LAYOUTS[elen] = (*known, _ExtLayout(ext, pos))


def _binary_ext(header: bytes, pos: int, end: int) -> dict[str, str]:
    """The ROCKETMQ extFields field by field: each length checked, non-ASCII text decoded as UTF-8 (the
    wire's encoding). Raises RemotingCommandError naming the first bad field, or UnicodeDecodeError."""
    ext: dict[str, str] = {}
    # Keys and values are sliced from one latin-1 view of the header (one decode, not two per field);
    # a slice that is not pure ASCII is decoded again from its bytes as UTF-8.
    text = header.decode("latin-1")
    unpack_i16 = _I16.unpack_from
    unpack_i32 = _I32.unpack_from
    while pos < end:
        if pos + 2 > end:
            raise RemotingCommandError("ROCKETMQ header: truncated extFields key length")
        (klen,) = unpack_i16(header, pos)
        kstart = pos + 2
        kend = kstart + klen
        if klen < 0 or kend + 4 > end:
            raise RemotingCommandError(f"ROCKETMQ header: extFields key length {klen} out of bounds")
        (vlen,) = unpack_i32(header, kend)
        vstart = kend + 4
        pos = vstart + vlen
        if vlen < 0 or pos > end:
            raise RemotingCommandError(f"ROCKETMQ header: extFields value length {vlen} out of bounds")
        key = text[kstart:kend]
        value = text[vstart:pos]
        if not (key.isascii() and value.isascii()):
            key = header[kstart:kend].decode()
            value = header[vstart:pos].decode()
        ext[key] = value
    return ext


def _binary_ext_bytes(ext: dict[str, Any]) -> bytes:
    """extFields as the ROCKETMQ header writes them (int16 key length, key, int32 value length, value, ...). Each
    key's length-prefixed bytes come from a small cache (a broker answers with a few dozen distinct keys: the
    SEND_OK ones are encoded once, not per response); values that are not str are turned into text (None
    omitted), as J's Map<String,String> would hold them. (A plain loop: map/zip/chain passes in C measured
    slower for the five fields of a SEND_OK, 2.6 → 3.8 µs an answer.)"""
    parts: list[bytes] = []
    key_bytes = _KEY_BYTES
    for key, value in ext.items():
        prefixed = key_bytes.get(key)
        if prefixed is None:
            prefixed = _key_bytes(key)
        if type(value) is not str:
            value = _ext_value_to_str(value)
            if value is None:
                continue
        vb = value.encode()
        parts += (prefixed, _pack_i32(len(vb)), vb)
    return b"".join(parts)


@dataclass(slots=True)
class RemotingCommand:
    code: int
    opaque: int = 0
    flag: int = 0  # bit0 response, bit1 oneway
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes | memoryview | None = None
    language: str = "JAVA"
    version: int = DEFAULT_VERSION
    serialize_type: int = _JSON  # SerializeType
    # A ROCKETMQ request whose extFields a learned layout read: that layout and the values in its order, so that a
    # processor may decode its header from them without the map (``remoting.headers.decode_send_message_v2_values``).
    # What was decoded: whoever changes ``ext_fields`` of a decoded request sets these to None.
    ext_layout: _ExtLayout | None = field(default=None, compare=False, repr=False)
    ext_values: tuple[str, ...] | None = field(default=None, compare=False, repr=False)
    # The request's header decoded ahead of processing (the send processor's ``groupable``, or the run reader of
    # ``remoting.send_run``: the header of a single send, so that the group does not decode it again); None: not
    # decoded yet. Whoever changes ``ext_fields`` of a decoded request sets it to None.
    custom_header: Any = field(default=None, compare=False, repr=False)

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes | memoryview | None = None,
        *,
        opaque: int = 0,
        oneway: bool = False,
        serialize_type: int = _JSON,
    ) -> RemotingCommand:
        """A request; the sender (client or channel) assigns the opaque from its own counter."""
        return cls(
            code=int(code),
            opaque=opaque,
            flag=FLAG_ONEWAY if oneway else 0,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
            serialize_type=serialize_type,
        )

    def response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes | memoryview | None = None,
    ) -> RemotingCommand:
        """The answer to this request: same opaque, response bit, same serialization type."""
        # positional (one per answer): a slotted dataclass builds about twice as fast that way
        return RemotingCommand(
            int(code),
            self.opaque,
            FLAG_RESPONSE,
            remark,
            ext_fields if ext_fields is not None else {},
            body,
            "JAVA",
            DEFAULT_VERSION,
            self.serialize_type,
        )

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    # ---- encode -------------------------------------------------------------------------
    def encode(self) -> list[bytes | memoryview]:
        """``[length + headerLenAndType + header, body]`` ready for ``transport.writelines``.

        The body is passed through untouched so large pull/send bodies are never copied here.
        """
        stype = self.serialize_type
        header = self._encode_binary_header() if stype == _ROCKETMQ else self._encode_json_header()
        hlen = len(header)
        if hlen > 0xFFFFFF:
            raise RemotingCommandError(f"header too long to encode: {hlen} bytes")
        body = self.body
        if body:
            return [_HEAD.pack(4 + hlen + len(body), (stype << 24) | hlen) + header, body]
        return [_HEAD.pack(4 + hlen, (stype << 24) | hlen) + header]

    def to_bytes(self) -> bytes:
        """The whole frame in one buffer (tests, tools; the server uses ``encode``)."""
        return b"".join(self.encode())

    def _encode_json_header(self) -> bytes:
        # Key order as fastjson writes it (alphabetical); remark omitted when None like J.
        # orjson writes IntEnum members as their numbers, so codes need no int() here.
        ext = self.ext_fields
        if self.remark is None:
            obj = {
                "code": self.code,
                "extFields": _outbound_ext(ext) if ext else {},
                "flag": self.flag,
                "language": self.language,
                "opaque": self.opaque,
                "serializeTypeCurrentRPC": _SERIALIZE_NAMES[self.serialize_type],
                "version": self.version,
            }
        else:
            obj = {
                "code": self.code,
                "extFields": _outbound_ext(ext) if ext else {},
                "flag": self.flag,
                "language": self.language,
                "opaque": self.opaque,
                "remark": self.remark,
                "serializeTypeCurrentRPC": _SERIALIZE_NAMES[self.serialize_type],
                "version": self.version,
            }
        try:
            return orjson.dumps(obj)
        except TypeError as exc:
            raise RemotingCommandError(f"cannot encode JSON header: {exc}") from exc

    def _encode_binary_header(self) -> bytes:
        ext = _binary_ext_bytes(self.ext_fields)
        try:
            fixed = _BIN_FIXED.pack(
                self.code,
                _LANG_NUMBER.get(self.language, LanguageCode.OTHER),
                self.version,
                self.opaque,
                self.flag,
            )
        except struct.error as exc:
            raise RemotingCommandError(f"cannot encode ROCKETMQ header: {exc}") from exc
        remark = self.remark
        if remark is None:
            return b"".join((fixed, _NO_REMARK, _pack_i32(len(ext)), ext))
        rb = remark.encode()
        return b"".join((fixed, _pack_i32(len(rb)), rb, _pack_i32(len(ext)), ext))

    # ---- decode -------------------------------------------------------------------------
    @classmethod
    def decode(cls, frame: memoryview | bytes | bytearray) -> RemotingCommand:
        """Decode the bytes that follow the 4-byte total length. The body is copied out of the
        frame (frames are views into the connection's receive buffer, which is reused)."""
        flen = len(frame)
        if flen < 4:
            raise RemotingCommandError(f"frame too short for a header length: {flen} bytes")
        (word,) = _U32.unpack_from(frame, 0)
        stype = word >> 24
        hlen = word & 0xFFFFFF
        if hlen > flen - 4:
            raise RemotingCommandError(
                f"header length {hlen} exceeds the frame ({flen - 4} bytes after the length word)"
            )
        if stype == _ROCKETMQ:
            cmd = cls._decode_binary_header(bytes(frame[4 : 4 + hlen]))
        elif stype == _JSON:
            cmd = cls._decode_json_header(frame[4 : 4 + hlen])
        else:
            raise RemotingCommandError(f"unknown serialization type {stype} (expected 0 JSON or 1 ROCKETMQ)")
        if flen > 4 + hlen:
            cmd.body = bytes(frame[4 + hlen :])
        return cmd

    @classmethod
    def _decode_json_header(cls, header: memoryview | bytes | bytearray) -> RemotingCommand:
        # (One itemgetter and a type-tuple compare for the common request instead of a get and a check per field
        # was tried: fewer bytecodes, 3-4 % more CPU under 3.11's specialised bytecodes.)
        try:
            obj = orjson.loads(header)
        except orjson.JSONDecodeError as exc:
            raise RemotingCommandError(f"invalid JSON header: {exc}") from exc
        if type(obj) is not dict:
            raise RemotingCommandError(f"JSON header is not an object but {type(obj).__name__}")
        # Read opaque/flag first so a later field error can still be answered.
        opaque = obj.get("opaque", 0)
        flag = obj.get("flag", 0)
        if type(opaque) is not int or type(flag) is not int:
            raise RemotingCommandError(f"JSON header: opaque/flag must be integers, got {opaque!r}/{flag!r}")
        code = obj.get("code", 0)
        version = obj.get("version", 0)
        language = obj.get("language", "JAVA")
        remark = obj.get("remark")
        ext = obj.get("extFields")
        try:
            if type(code) is not int:
                raise RemotingCommandError(f"JSON header: 'code' must be an integer, got {code!r}")
            if type(version) is not int:
                raise RemotingCommandError(f"JSON header: 'version' must be an integer, got {version!r}")
            if type(language) is not str:
                raise RemotingCommandError(f"JSON header: 'language' must be a string, got {language!r}")
            if remark is not None and type(remark) is not str:
                raise RemotingCommandError(f"JSON header: 'remark' must be a string, got {remark!r}")
            if ext is None:
                ext = {}
            elif type(ext) is dict:
                ext = _normalise_ext(ext)
            else:
                raise RemotingCommandError(f"JSON header: 'extFields' must be an object, got {type(ext).__name__}")
        except RemotingCommandError as exc:
            exc.opaque = opaque
            exc.flag = flag
            raise
        # positional: about twice as fast as keywords for a slotted dataclass
        return cls(code, opaque, flag, remark, ext, None, language, version, _JSON)

    @classmethod
    def decode_at(cls, buf: bytes | bytearray, start: int, end: int) -> RemotingCommand:
        """``decode(buf[start:end])``, the same command or error, for the connection's frame split
        (``RemotingProtocol._process``): a frame in an immutable read (bytes) is cut into header and body straight
        from ``buf`` (two slices, no view of the frame); a frame in a grown buffer, and any bad length or
        serialization type, go through ``decode``.

        The common request (ROCKETMQ, no remark, extFields of a learned layout: the benchmark Producer's sends) is
        read here in one piece: the header word names its layouts (``_LAYOUTS`` by extFields length: the word less
        ``_NO_REMARK_WORD`` is that length only for a ROCKETMQ header), the layout's one struct call reads the header
        in place, and the command is made without the dataclass ``__init__`` (its fields set here: one C call and a
        store each, about half the bytecodes). Anything else goes the way ``_decode_binary_header`` goes."""
        if buf.__class__ is bytes and end - start >= 4:
            (word,) = _U32.unpack_from(buf, start)
            hstart = start + 4
            layouts = _LAYOUTS.get(word - _NO_REMARK_WORD)
            if layouts is not None:
                hend = hstart + (word & 0xFFFFFF)
                if hend <= end:
                    for layout in layouts:
                        fields = layout.header_unpack_from(buf, hstart)
                        if fields[5:] == layout.header_expected:
                            values = layout.values(buf[hstart:hend].decode("latin-1"))
                            if "".join(values).isascii():
                                # (the dataclass __init__'s stores, in its field order; what it would store)
                                cmd = _new_command(LayoutCommand)
                                cmd.code = fields[0]
                                cmd.opaque = fields[3]
                                cmd.flag = fields[4]
                                cmd.remark = None
                                cmd._ext = None  # (the map: built when first read)
                                cmd.body = buf[hend:end] if end > hend else None
                                cmd.language = _LANG_NAMES[fields[1]]
                                cmd.version = fields[2]
                                cmd.serialize_type = _ROCKETMQ
                                cmd.ext_layout = layout
                                cmd.ext_values = values
                                cmd.custom_header = None
                                return cmd
                            break
            hend = hstart + (word & 0xFFFFFF)
            stype = word >> 24
            if hend <= end and stype <= _ROCKETMQ:
                if stype == _ROCKETMQ:
                    cmd = cls._decode_binary_header(buf[hstart:hend])
                else:
                    cmd = cls._decode_json_header(buf[hstart:hend])
                if end > hend:
                    cmd.body = buf[hend:end]
                return cmd
        return cls.decode(memoryview(buf)[start:end])

    @classmethod
    def _decode_binary_header(cls, header: bytes) -> RemotingCommand:  # (decode_at's fast path: the same)
        # The common request (no remark, extFields of a learned layout): the whole header read by the layout's one
        # struct call and checked against it here, as ``_decode_binary_fields`` would read it through
        # ``_match_layout`` (same command, same layout and values: the differential test pins it); any other header
        # is read field by field there.
        for layout in _LAYOUTS.get(len(header) - _NO_REMARK_EXT, ()):
            fields = layout.header_unpack(header)
            if fields[5:] == layout.header_expected:
                values = layout.values(header.decode("latin-1"))
                if "".join(values).isascii():
                    return cls(
                        fields[0],
                        fields[3],
                        fields[4],
                        None,
                        dict(zip(layout.keys, values)),
                        None,
                        _LANG_BY_NUMBER.get(fields[1], "OTHER"),
                        fields[2],
                        _ROCKETMQ,
                        layout,
                        values,
                    )
                break
        return cls._decode_binary_fields(header)

    @classmethod
    def _decode_binary_fields(cls, header: bytes) -> RemotingCommand:
        n = len(header)
        if n < _BIN_FIXED.size + 8:
            raise RemotingCommandError(f"ROCKETMQ header truncated: {n} bytes")
        code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(header, 0)
        try:
            pos = _BIN_FIXED.size
            (rlen,) = _I32.unpack_from(header, pos)
            pos += 4
            if rlen < 0 or pos + rlen > n - 4:
                raise RemotingCommandError(f"ROCKETMQ header: remark length {rlen} out of bounds")
            remark = header[pos : pos + rlen].decode() if rlen else None
            pos += rlen
            (elen,) = _I32.unpack_from(header, pos)
            pos += 4
            if elen < 0 or pos + elen > n:
                raise RemotingCommandError(f"ROCKETMQ header: extFields length {elen} out of bounds")
            end = pos + elen
            match = _match_layout(header, pos, end) if elen else None
            if match is not None:
                layout, values = match
                ext = dict(zip(layout.keys, values))
            else:
                layout = values = None
                ext = _binary_ext_fast(header, pos, end) if elen else {}
                if ext is None:
                    ext = _binary_ext(header, pos, end)
                elif len(ext) > 1:
                    _learn_layout(ext, pos, end)
        except UnicodeDecodeError as exc:
            raise RemotingCommandError(
                f"ROCKETMQ header: invalid UTF-8: {exc}", opaque=opaque, flag=flag, serialize_type=_ROCKETMQ
            ) from exc
        except RemotingCommandError as exc:
            exc.opaque = opaque
            exc.flag = flag
            exc.serialize_type = _ROCKETMQ
            raise
        return cls(
            code,
            opaque,
            flag,
            remark,
            ext,
            None,
            _LANG_BY_NUMBER.get(lang, "OTHER"),
            version,
            _ROCKETMQ,
            layout,
            values,
        )


class LayoutCommand(RemotingCommand):
    """A command ``decode_at`` read by a learned layout (see there): the same command, whose extFields map is built
    from the layout's keys and values when it is first read. A processor that decodes its header from the values
    (the send processor's single sends: ``remoting.send_header``) never builds it: one ``dict`` of ~14 pairs a send
    (~1 µs) saved. Equal to the ``RemotingCommand`` of the same fields, either way round."""

    __slots__ = ("_ext",)

    @property  # type: ignore[override]
    def ext_fields(self) -> dict[str, str]:
        try:
            ext = self._ext
        except AttributeError:  # (never set: ``remoting.send_run``'s commands leave it unset, one store a send fewer)
            ext = None
        if ext is None:
            ext = self._ext = dict(zip(self.ext_layout.keys, self.ext_values))  # type: ignore[union-attr,arg-type]
        return ext

    @ext_fields.setter
    def ext_fields(self, value: dict[str, str]) -> None:
        self._ext = value

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RemotingCommand):
            return NotImplemented
        return equality_fields(self) == equality_fields(other)

    __hash__ = None  # type: ignore[assignment]  # (as the dataclass: mutable)


def equality_fields(cmd: RemotingCommand) -> tuple[object, ...]:
    """The fields a command's equality compares (the dataclass's: not the layout, its values or the header); the
    tests that pin a decode against another compare these and add what they pin besides."""
    return (
        cmd.code,
        cmd.opaque,
        cmd.flag,
        cmd.remark,
        cmd.ext_fields,
        cmd.body,
        cmd.language,
        cmd.version,
        cmd.serialize_type,
    )


#: a command without its ``__init__`` (``decode_at`` sets every field itself)
_new_command = object.__new__
