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


class PullAnswer(RemotingCommand):
    """A ``RemotingCommand`` in every respect (same fields, same bytes on the wire); only ``encode`` is faster for
    the answers a pull gives. Build one with ``answer``."""

    __slots__ = ()

    @classmethod
    def answer(
        cls,
        request: RemotingCommand,
        code: int,
        remark: str,
        next_begin_offset: int,
        min_offset: int,
        max_offset: int,
        body: bytes | None = None,
    ) -> PullAnswer:
        """The response to ``request`` with a pull's four extFields, as ``request.response(...)`` builds it."""
        ext = {
            "suggestWhichBrokerId": "0",
            "nextBeginOffset": str(next_begin_offset),
            "minOffset": str(min_offset),
            "maxOffset": str(max_offset),
        }
        # positional: a slotted dataclass builds about twice as fast that way
        return cls(
            int(code), request.opaque, FLAG_RESPONSE, remark, ext, body, "JAVA", DEFAULT_VERSION, request.serialize_type
        )

    def encode(self) -> list[bytes | memoryview]:
        if self.serialize_type != ROCKETMQ or self.language != "JAVA" or self.version != DEFAULT_VERSION:
            return RemotingCommand.encode(self)
        ext = self.ext_fields
        try:
            remark = _REMARKS.get(self.remark)  # type: ignore[arg-type]
            if remark is None or len(ext) != 4:
                return RemotingCommand.encode(self)
            suggest, next_begin, min_offset, max_offset = ext.values()
            # (dict order is insertion order: the keys checked in one compare of the tuple)
            if tuple(ext) != KEYS or suggest != "0":
                return RemotingCommand.encode(self)
            values = next_begin + min_offset + max_offset  # (TypeError unless all three are str)
            if not values.isascii():  # the generic encode writes UTF-8
                return RemotingCommand.encode(self)
            size = _LEN  # (IndexError for extFields of 1024 bytes or more)
            text = (
                f"{remark}{size[_FIXED_EXT + len(values)]}{_SUGGEST_ZERO_AND_NEXT_KEY}{size[len(next_begin)]}"
                f"{next_begin}{_MIN_KEY}{size[len(min_offset)]}{min_offset}{_MAX_KEY}{size[len(max_offset)]}{max_offset}"
            )
            hlen = _FIXED_SIZE + len(text)
            body = self.body
            blen = len(body) if body else 0
            header = _FRAME_HEAD.pack(
                4 + hlen + blen, (ROCKETMQ << 24) | hlen, self.code, _JAVA, DEFAULT_VERSION, self.opaque, self.flag
            ) + text.encode("latin-1")
        except (IndexError, TypeError, struct.error):
            # a value that is not a str, extFields of 1024 bytes or more, or a field out of its wire range: the
            # generic encode writes it (or raises its own error for it)
            return RemotingCommand.encode(self)
        if blen:
            return [header, body]  # type: ignore[list-item]
        return [header]
