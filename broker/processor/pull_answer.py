"""``PullAnswer``: a pull's response, whose ROCKETMQ frame header is written from pre-encoded parts.

RocketMQ 4.9.7's benchmark Consumer, like its Producer, sets ``rocketmq.serialize.type=ROCKETMQ``, so every
answer to its pulls is a binary header: the generic ``RemotingCommand`` encode walks the four extFields as a dict
(key cache, type check, a length pack per value) and joins the frame from five pieces, ~300 bytecodes per answer.
A pull's answer always has the same keys in the same order, of which ``suggestWhichBrokerId`` is always "0", and a
remark from a short list (the store status's name), so all of that but the three offsets and the opaque is fixed
bytes here: the frame's length words and the fixed header fields are one ``struct`` pack, the remark and the keys
with their length prefixes constants.

Anything that is not such an answer (JSON serialization, other keys or values, a changed remark, language or
version) takes the generic encode, so the bytes are always what ``RemotingCommand.encode`` writes:
``tests/broker/test_pull_answer.py`` pins that, on the answers a pull gives and on arbitrary ones.
"""

from __future__ import annotations

import struct

from remoting.codes import LanguageCode
from remoting.command import DEFAULT_VERSION, FLAG_RESPONSE, RemotingCommand
from store.results import GetMessageStatus

ROCKETMQ = 1  # SerializeType.ROCKETMQ as RemotingCommand holds it

# total length, headerLenAndType, then the ROCKETMQ fixed fields: code, language, version, opaque, flag
_FRAME_HEAD = struct.Struct(">IIhbhii")
_FIXED_SIZE = 2 + 1 + 2 + 4 + 4
_JAVA = LanguageCode.JAVA.value
_ROCKETMQ_JAVA = (ROCKETMQ, "JAVA", DEFAULT_VERSION)  # the serialization, language and version the fast encode writes
_ROCKETMQ_MARK = ROCKETMQ << 24  # headerLenAndType's serialization byte

KEYS = ("suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset")

# The header after its fixed fields is written as one latin-1 str (one encode): every byte of it is a char below
# 256 there. The length prefixes are such chars too, from a table of lengths below 1024 (an answer's extFields are
# 78 bytes and the offsets' digits; longer ones, which no pull gives, take the generic encode).
_LEN = tuple(struct.pack(">i", n).decode("latin-1") for n in range(1024))


def _key(name: str) -> str:
    return struct.pack(">h", len(name)).decode("latin-1") + name


# suggestWhichBrokerId "0" whole, then each offset's key (its value's length and digits follow)
_SUGGEST_ZERO_AND_NEXT_KEY = _key(KEYS[0]) + _LEN[1] + "0" + _key(KEYS[1])
_MIN_KEY = _key(KEYS[2])
_MAX_KEY = _key(KEYS[3])
_FIXED_EXT = len(_SUGGEST_ZERO_AND_NEXT_KEY) + len(_MIN_KEY) + len(_MAX_KEY) + 3 * 4

# the remarks pulls answer with (the store status's name, ASCII) → their int32 length and text
_REMARKS = {status.name: _LEN[len(status.name)] + status.name for status in GetMessageStatus}


def _int_path_format(remark: str) -> str:
    """The header after its fixed fields for one remark, as a %-format of (extFields length, then each offset's
    length and digits): a length below 256 is three zero bytes and ``%c`` of it, one format call for the whole."""
    prefix = "\0\0\0%c"
    return "".join(
        (
            _REMARKS[remark].replace("%", "%%"),
            prefix,
            _SUGGEST_ZERO_AND_NEXT_KEY.replace("%", "%%"),
            prefix + "%s",
            _MIN_KEY.replace("%", "%%"),
            prefix + "%s",
            _MAX_KEY.replace("%", "%%"),
            prefix + "%s",
        )
    )


_FORMATS = {name: _int_path_format(name) for name in _REMARKS}


class PullAnswer(RemotingCommand):
    """A ``RemotingCommand`` in every respect (same fields, same bytes on the wire); only ``encode`` is faster for
    the answers a pull gives.

    It holds its three offsets as ints (``next_begin_offset``, ``min_offset``, ``max_offset``) and builds the
    extFields map only when someone reads ``ext_fields`` (nobody on the way to the socket): until then ``encode``
    writes the ROCKETMQ header from the ints with no map to build, walk and check (a caught-up consumer's every
    message is one answer). Once the map was read (it may have been changed) or set, ``encode`` writes from it,
    checked, or with the generic encode, as before."""

    # No __slots__: an instance dict lets the fields every answer has alike be class attributes, read until set (the
    # executor sets ``flag`` again; tests set the others), six stores fewer an answer. They shadow the base's slots.
    flag = FLAG_RESPONSE
    language = "JAVA"
    version = DEFAULT_VERSION
    ext_layout = None
    ext_values = None
    _ext: dict[str, str] | None = None
    custom_header = None  # (RemotingCommand's field: a decoded request header; an answer has none)

    def __init__(  # (no super().__init__: the dataclass's would store an extFields map)
        self,
        request: RemotingCommand,
        code: int,
        remark: str,
        next_begin_offset: int,
        min_offset: int,
        max_offset: int,
        body: bytes | memoryview | None = None,
    ) -> None:
        """The response to ``request`` with a pull's four extFields, as ``request.response(...)`` builds it; the
        offsets are ints."""
        self.code = int(code)
        self.opaque = request.opaque
        self.remark = remark
        self.body = body
        self.serialize_type = request.serialize_type
        self.next_begin_offset = next_begin_offset
        self.min_offset = min_offset
        self.max_offset = max_offset

    @property  # type: ignore[override]
    def ext_fields(self) -> dict[str, str]:
        ext = self._ext
        if ext is None:
            ext = self._ext = {
                "suggestWhichBrokerId": "0",
                "nextBeginOffset": str(self.next_begin_offset),
                "minOffset": str(self.min_offset),
                "maxOffset": str(self.max_offset),
            }
        return ext

    @ext_fields.setter
    def ext_fields(self, value: dict[str, str]) -> None:
        self._ext = value

    def encode(self) -> list[bytes | memoryview]:
        if (self.serialize_type, self.language, self.version) != _ROCKETMQ_JAVA:  # (one compare for the three)
            return RemotingCommand.encode(self)
        fmt = _FORMATS.get(self.remark)  # type: ignore[arg-type]
        if fmt is None:
            return RemotingCommand.encode(self)
        if self._ext is not None:
            return self._encode_map(_REMARKS[self.remark])  # type: ignore[index]
        # The map as it would be built: three ints' digits. (`_frame`, unrolled and with one %-format: one caught-up
        # consumer's message is one answer.)
        next_begin = str(self.next_begin_offset)
        min_offset = str(self.min_offset)
        max_offset = str(self.max_offset)
        nlen = len(next_begin)
        minlen = len(min_offset)
        maxlen = len(max_offset)
        body = self.body
        blen = len(body) if body else 0
        try:
            text = (
                fmt % (_FIXED_EXT + nlen + minlen + maxlen, nlen, next_begin, minlen, min_offset, maxlen, max_offset)
            ).encode("latin-1")
            hlen = _FIXED_SIZE + len(text)
            header = (
                _FRAME_HEAD.pack(
                    4 + hlen + blen, _ROCKETMQ_MARK | hlen, self.code, _JAVA, DEFAULT_VERSION, self.opaque, self.flag
                )
                + text
            )
        except (struct.error, UnicodeEncodeError, OverflowError):
            # a field out of its wire range, or offsets of hundreds of digits (a length of 256 or more is no one
            # char): the generic encode writes it (or raises its own error for it)
            return RemotingCommand.encode(self)
        if blen:
            return [header, body]  # type: ignore[list-item]
        return [header]

    def _encode_map(self, remark: str) -> list[bytes | memoryview]:
        """The extFields map was read or set: written from it when it is still a pull's four keys in order with
        ASCII str values, else by the generic encode."""
        ext = self._ext
        try:
            if len(ext) != 4:  # type: ignore[arg-type]
                return RemotingCommand.encode(self)
            suggest, next_begin, min_offset, max_offset = ext.values()  # type: ignore[union-attr]
            # (dict order is insertion order: the keys checked in one compare of the tuple)
            if tuple(ext) != KEYS or suggest != "0":  # type: ignore[arg-type]
                return RemotingCommand.encode(self)
            if not (next_begin + min_offset + max_offset).isascii():  # (TypeError unless all three are str)
                return RemotingCommand.encode(self)  # the generic encode writes UTF-8
            return self._frame(remark, next_begin, min_offset, max_offset)
        except TypeError:  # a value that is not a str: the generic encode writes it (or raises for it)
            return RemotingCommand.encode(self)

    def _frame(self, remark: str, next_begin: str, min_offset: str, max_offset: str) -> list[bytes | memoryview]:
        """The ROCKETMQ frame: ``remark`` pre-encoded with its length, the offsets ASCII str (IndexError for
        extFields of 1024 bytes or more)."""
        size = _LEN
        body = self.body
        blen = len(body) if body else 0
        try:
            text = (
                f"{remark}{size[_FIXED_EXT + len(next_begin) + len(min_offset) + len(max_offset)]}"
                f"{_SUGGEST_ZERO_AND_NEXT_KEY}{size[len(next_begin)]}{next_begin}{_MIN_KEY}{size[len(min_offset)]}"
                f"{min_offset}{_MAX_KEY}{size[len(max_offset)]}{max_offset}"
            )
            hlen = _FIXED_SIZE + len(text)
            header = _FRAME_HEAD.pack(
                4 + hlen + blen, (ROCKETMQ << 24) | hlen, self.code, _JAVA, DEFAULT_VERSION, self.opaque, self.flag
            ) + text.encode("latin-1")
        except (IndexError, struct.error):
            # extFields of 1024 bytes or more, or a field out of its wire range: the generic encode writes it (or
            # raises its own error for it)
            return RemotingCommand.encode(self)
        if blen:
            return [header, body]  # type: ignore[list-item]
        return [header]
