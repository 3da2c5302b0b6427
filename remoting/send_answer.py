"""The answer to a stored single send, written from a pre-encoded template in the request's serialization.

A broker under send load answers every message with the same header but for four values: the opaque, the
message id, the queue id and the queue offset (protocol §2.2, SendMessageResponseHeader; plus MSG_REGION and
TRACE_ON, fixed by the broker's config). ``SendResultAnswer`` carries those values instead of an extFields map and
writes its frame from a ``SendResultTemplate``: one ``struct`` pack and one join for a ROCKETMQ header, one string
format for a JSON one, where the generic encode builds and walks a map and calls orjson (or packs each field).
The bytes are the generic encode's own, byte for byte (tests/remoting/test_send_answer.py pins both against it).

Anything that reads ``ext_fields`` gets the map, built on first read; from then on (it may have been changed) the
answer is written by the generic encode, as is one whose remark, body, language or version is not the template's.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Iterable

import orjson

from remoting.codes import ResponseCode
from remoting.command import _ROCKETMQ, DEFAULT_VERSION, FLAG_RESPONSE, RemotingCommand

# length, headerLenAndType, then RocketMQSerializable's code, language (JAVA = 0), version, opaque, flag, remark
# length (none: 0), extFields length
_ROCKETMQ_HEAD = struct.Struct(">IIhbhiiii")
_ROCKETMQ_HEAD_BYTES = 21  # code .. extFields length: the header bytes before the extFields
_JSON = 0
_JSON_HEAD = struct.Struct(">II")


def _rocketmq_field(key: str, value: str) -> bytes:
    kb = key.encode()
    vb = value.encode()
    return struct.pack(">h", len(kb)) + kb + struct.pack(">i", len(vb)) + vb


class SendResultTemplate:
    """The fixed parts of a SEND answer for one (MSG_REGION, TRACE_ON): made once, used for every answer while
    the broker's config keeps those two values."""

    __slots__ = ("region", "trace_on", "rocketmq_tail", "rocketmq_tail_text", "json_fields")

    def __init__(self, region: str, trace_on: str) -> None:
        self.region = region
        self.trace_on = trace_on
        # ROCKETMQ: after msgId, queueId and queueOffset come the two fixed fields (as bytes, and as the latin-1 text
        # an answer's one encode folds in)
        self.rocketmq_tail = _rocketmq_field("MSG_REGION", region) + _rocketmq_field("TRACE_ON", trace_on)
        self.rocketmq_tail_text = self.rocketmq_tail.decode("latin-1")
        # JSON: the two fixed fields as orjson writes them in the generic answer's map (no spaces)
        self.json_fields = orjson.dumps({"MSG_REGION": region, "TRACE_ON": trace_on}).decode()[1:-1]

    def matches(self, region: str, trace_on: str) -> bool:
        return region == self.region and trace_on == self.trace_on


class SendResultAnswer(RemotingCommand):
    """A SEND answer held as its values (see the module docstring). ``opaque`` and ``flag`` are read when it is
    written, so the executor may set them after the processor made it, as for any answer.

    ``remark``, ``body``, ``language``, ``version`` and ``ext_fields`` are properties over one ``_changed`` map,
    None while the answer is the template's (no remark, no body, JAVA, the default version, the map never read):
    the constructor stores four fields fewer and ``encode`` asks one question where it asked five."""

    __slots__ = ("template", "msg_id", "queue_id", "queue_offset", "_changed")

    def __init__(  # (no super().__init__: the dataclass's would store an extFields map)
        self,
        template: SendResultTemplate,
        request: RemotingCommand,
        code: int,
        msg_id: str,
        queue_id: int,
        queue_offset: int,
    ) -> None:
        """``code`` an int (a ``ResponseCode`` writes the same), ``msg_id`` a str (the store's hex offset id),
        ``queue_id`` and ``queue_offset`` ints."""
        self.code = code
        self.opaque = request.opaque
        self.flag = FLAG_RESPONSE
        self.serialize_type = request.serialize_type
        self.template = template
        self.msg_id = msg_id
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self._changed: dict[str, object] | None = None

    def _set(self, name: str, value: object) -> None:
        changed = self._changed
        if changed is None:
            changed = self._changed = {}
        changed[name] = value

    @property  # type: ignore[override]
    def remark(self) -> str | None:
        changed = self._changed
        return None if changed is None else changed.get("remark")  # type: ignore[return-value]

    @remark.setter
    def remark(self, value: str | None) -> None:
        self._set("remark", value)

    @property  # type: ignore[override]
    def body(self) -> bytes | memoryview | None:
        changed = self._changed
        return None if changed is None else changed.get("body")  # type: ignore[return-value]

    @body.setter
    def body(self, value: bytes | memoryview | None) -> None:
        self._set("body", value)

    @property  # type: ignore[override]
    def language(self) -> str:
        changed = self._changed
        return "JAVA" if changed is None else changed.get("language", "JAVA")  # type: ignore[return-value]

    @language.setter
    def language(self, value: str) -> None:
        self._set("language", value)

    @property  # type: ignore[override]
    def version(self) -> int:
        changed = self._changed
        return DEFAULT_VERSION if changed is None else changed.get("version", DEFAULT_VERSION)  # type: ignore[return-value]

    @version.setter
    def version(self, value: int) -> None:
        self._set("version", value)

    @property  # type: ignore[override]
    def ext_fields(self) -> dict[str, str]:
        changed = self._changed
        ext = None if changed is None else changed.get("ext_fields")
        if ext is None:
            template = self.template
            ext = {
                "msgId": self.msg_id,
                "queueId": str(self.queue_id),
                "queueOffset": str(self.queue_offset),
                "MSG_REGION": template.region,
                "TRACE_ON": template.trace_on,
            }
            self._set("ext_fields", ext)  # (it may be changed from here on: written by the generic encode)
        return ext  # type: ignore[return-value]

    @ext_fields.setter
    def ext_fields(self, value: dict[str, str]) -> None:
        self._set("ext_fields", value)

    def encode(self) -> list[bytes | memoryview]:
        msg_id = self.msg_id
        if self._changed is not None or not (
            msg_id.isascii() and msg_id.isalnum() and len(msg_id) < 256
        ):  # (any field changed, or read: the generic encode; a hex id: no JSON escape, one length byte)
            return RemotingCommand.encode(self)
        template = self.template
        if self.serialize_type == _ROCKETMQ:
            # the common answer (a queue id below 256, a response code of the table, the response bit alone): the
            # head packed as ``encode_answers`` packs it, the queueId field from its table, the fixed tail folded
            # into the one encode
            queue_field = _QUEUE_ID_FIELDS.get(self.queue_id)
            code_field = _CODE_FIELDS.get(self.code)
            if queue_field is not None and code_field is not None and self.flag == FLAG_RESPONSE:
                offset = str(self.queue_offset)
                ext = (
                    f"\0\5msgId\0\0\0{chr(len(msg_id))}{msg_id}{queue_field}"
                    f"\0\13queueOffset\0\0\0{chr(len(offset))}{offset}{template.rocketmq_tail_text}"
                ).encode("latin-1")
                elen = len(ext)
                try:
                    return [
                        _ROCKETMQ_ANSWER_HEAD.pack(
                            25 + elen, _WORD_ROCKETMQ + elen, code_field, self.opaque, _FLAG_REMARK, elen
                        )
                        + ext
                    ]
                except struct.error:
                    return RemotingCommand.encode(self)  # (which raises the error it raises for any answer)
        queue_id = str(self.queue_id)
        offset = str(self.queue_offset)
        if self.serialize_type == _ROCKETMQ:
            # msgId, queueId, queueOffset as (int16 key length, key, int32 value length, value), every length
            # below 256: one latin-1 string, one encode
            ext = (
                f"\0\5msgId\0\0\0{chr(len(msg_id))}{msg_id}\0\7queueId\0\0\0{chr(len(queue_id))}{queue_id}"
                f"\0\13queueOffset\0\0\0{chr(len(offset))}{offset}"
            ).encode("latin-1") + template.rocketmq_tail
            elen = len(ext)
            try:
                head = _ROCKETMQ_HEAD.pack(
                    4 + _ROCKETMQ_HEAD_BYTES + elen,
                    (_ROCKETMQ << 24) | (_ROCKETMQ_HEAD_BYTES + elen),
                    self.code,
                    0,
                    DEFAULT_VERSION,
                    self.opaque,
                    self.flag,
                    0,
                    elen,
                )
            except struct.error:
                return RemotingCommand.encode(self)  # (which raises the error it raises for any answer)
            return [head + ext]
        if self.serialize_type != _JSON:
            return RemotingCommand.encode(self)
        header = (
            f'{{"code":{self.code},"extFields":{{"msgId":"{msg_id}","queueId":"{queue_id}",'
            f'"queueOffset":"{offset}",{template.json_fields}}},"flag":{self.flag},"language":"JAVA",'
            f'"opaque":{self.opaque},"serializeTypeCurrentRPC":"JSON","version":{DEFAULT_VERSION}}}'
        ).encode()
        hlen = len(header)
        return [_JSON_HEAD.pack(4 + hlen, hlen) + header]


_MSG_ID = operator.attrgetter("msg_id")
_CHANGED = operator.attrgetter("_changed")
_SERIALIZE_TYPE = operator.attrgetter("serialize_type")
_FLAG = operator.attrgetter("flag")
_RESPONSE_FLAG_ONLY = {FLAG_RESPONSE}
_WORD_ROCKETMQ = (_ROCKETMQ << 24) | _ROCKETMQ_HEAD_BYTES


def encode_answers(requests: list[RemotingCommand], answers: list[SendResultAnswer]) -> bytes | None:
    """The frames of a group's answers, each ``answers[i]`` the answer to ``requests[i]``, in one buffer: the bytes
    ``RequestGroup`` writes for them one by one (each answer's opaque set to its request's and its flag given the
    response bit, then ``encode``), or None when one of them would not be written from its template (a field
    changed or read, a flag other than the response bit, a msgId that is not plain ASCII letters and digits below
    256 characters, serializations mixed, a queue id not in the table; for ROCKETMQ also answer codes or msgId
    lengths mixed): then they go the general way. Raises
    ``struct.error`` for a number out of its field's range (the general way raises the precise error for that
    answer alone).

    Why: a group of 16 sends wrote 16 answers through 16 ``encode`` calls and a list of parts each; here the
    questions ``encode`` asks of each answer are asked once for the group (in C: ``map`` and ``set``), and each
    answer costs one format and, for ROCKETMQ, one pack of six fields (what every answer of the group has alike
    packed once: code, language, version, flag, remark) (tests/remoting/test_send_answer.py pins the bytes)."""
    if any(map(_CHANGED, answers)):  # (a map of changes is never empty)
        return None
    ids = list(map(_MSG_ID, answers))
    joined = "".join(ids)  # (raises TypeError for an id that is not a str: the general way then)
    if not (joined.isascii() and joined.isalnum() and max(map(len, ids)) < 256):
        return None
    if set(map(_FLAG, answers)) != _RESPONSE_FLAG_ONLY:  # (as made: the response bit alone)
        return None
    stypes = set(map(_SERIALIZE_TYPE, answers))
    parts: list[bytes] = []
    if stypes == _ROCKETMQ_ONLY:
        templates = set(map(_TEMPLATE, answers))
        codes = set(map(_CODE, answers))
        if len(templates) != 1 or len(codes) != 1:
            return None
        tail = templates.pop().rocketmq_tail_text  # (folded into each answer's one encode)
        # the header's fields alike in every answer: code, language (JAVA) and version; flag and remark length
        code_language_version = _CODE_LANGUAGE_VERSION.pack(codes.pop(), 0, DEFAULT_VERSION)
        # msgId's key and length byte once for the group when every id has one length (the store's: 32 hex digits)
        lengths = set(map(len, ids))
        if len(lengths) != 1:
            return None
        rows = zip(map(_OPAQUE, requests), ids, map(_QUEUE_ID, answers), map(_QUEUE_OFFSET, answers))
        return _pack_rocketmq_answers(rows, code_language_version, lengths.pop(), tail)
    if stypes == _JSON_ONLY:
        pack = _JSON_HEAD.pack
        for request, answer, msg_id in zip(requests, answers, ids):
            header = (
                f'{{"code":{answer.code},"extFields":{{"msgId":"{msg_id}","queueId":"{answer.queue_id}",'
                f'"queueOffset":"{answer.queue_offset}",{answer.template.json_fields}}},'
                f'"flag":{FLAG_RESPONSE},"language":"JAVA","opaque":{request.opaque},'
                f'"serializeTypeCurrentRPC":"JSON","version":{DEFAULT_VERSION}}}'
            ).encode()
            hlen = len(header)
            parts += (pack(4 + hlen, hlen), header)
        return b"".join(parts)
    return None


_ROCKETMQ_ONLY = {_ROCKETMQ}
_TEMPLATE = operator.attrgetter("template")
_CODE = operator.attrgetter("code")
# an answer's frame head in one pack: length, headerLenAndType, code + language + version (alike in a group), opaque,
# flag + remark length (the response bit, no remark), extFields length
_ROCKETMQ_ANSWER_HEAD = struct.Struct(">II5si8si")
_CODE_LANGUAGE_VERSION = struct.Struct(">hbh")
_FLAG_REMARK = struct.pack(">ii", FLAG_RESPONSE, 0)
# msgId, queueId, queueOffset as (int16 key length, key, int32 value length, value), every length below 256: the
# queueId field (key and value) of a queue id below 256 from a table (a KeyError for any other: the general way)
_QUEUE_ID_FIELDS = {i: f"\0\7queueId\0\0\0{chr(len(str(i)))}{i}" for i in range(256)}
_JSON_ONLY = {_JSON}
# the head's code, language (JAVA) and version of an answer with each response code (``SendResultAnswer.encode``)
_CODE_FIELDS = {int(code): _CODE_LANGUAGE_VERSION.pack(int(code), 0, DEFAULT_VERSION) for code in ResponseCode}


class SentAnswers:
    """The answers of a group of single sends that were all stored (``SUCCESS``), held as the store's results: each
    request's ``(msg_id, queue_offset, size)`` and queue id, and the group's template. What a processor returns in
    place of its list of answers for such a group (``process_requests``).

    Why: a group answered by one ``SendResultAnswer`` a send paid ~30 bytecodes a send to make each object and ~15 to
    read it back for ``encode_answers``; here the frames are written straight from the results (``encode``, one
    f-string and one pack an answer), and anything that reads the answers one by one (the general write, the metrics'
    per-request path, a debug log) gets the same ``SendResultAnswer``s, made on first read (``answers``).
    tests/remoting/test_send_answer.py pins ``encode`` against ``encode_answers`` over the answers byte for byte."""

    __slots__ = ("template", "requests", "results", "queue_ids", "_answers")

    #: every answer's response code
    code = int(ResponseCode.SUCCESS)

    def __init__(
        self, template: SendResultTemplate, requests: list[RemotingCommand], results: list, queue_ids: list[int]
    ) -> None:
        """``results[i]`` the store's result for ``requests[i]`` (msg_id a str, queue offset an int, size), and
        ``queue_ids[i]`` its queue id."""
        self.template = template
        self.requests = requests
        self.results = results
        self.queue_ids = queue_ids
        self._answers: list[SendResultAnswer] | None = None

    def answers(self) -> list[SendResultAnswer]:
        """The answers as ``SendResultAnswer``s (made once)."""
        answers = self._answers
        if answers is None:
            template = self.template
            code = self.code
            answers = self._answers = [
                SendResultAnswer(template, request, code, result[0], queue_id, result[1])
                for request, result, queue_id in zip(self.requests, self.results, self.queue_ids)
            ]
        return answers

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.answers())

    def __getitem__(self, index):  # type: ignore[no-untyped-def]
        return self.answers()[index]

    def encode(self) -> bytes | None:
        """The group's frames in one buffer: the bytes ``encode_answers(requests, answers())`` gives (and so those
        ``RequestGroup`` writes one by one), or, where that gives None or raises ``struct.error``, either of them
        (both send the group the general way, which writes or refuses each answer itself). Once the answers were
        read (``answers``: they may have been changed), it is ``encode_answers`` over them."""
        requests = self.requests
        if self._answers is not None:
            return encode_answers(requests, self._answers)
        results = self.results
        ids = list(map(_FIRST, results))
        joined = "".join(ids)  # (raises TypeError for an id that is not a str: the general way then)
        if not ids or not (joined.isascii() and joined.isalnum()):
            return None
        lengths = set(map(len, ids))
        stypes = set(map(_SERIALIZE_TYPE, requests))
        if stypes != _ROCKETMQ_ONLY or len(lengths) != 1:
            return encode_answers(requests, self.answers())  # (JSON, mixed: the general group encode)
        id_length = lengths.pop()
        if id_length >= 256:
            return None
        # read straight from the results: no answer object a send
        rows = zip(map(_OPAQUE, requests), ids, self.queue_ids, map(_SECOND, results))
        return _pack_rocketmq_answers(rows, _CODE_FIELDS[self.code], id_length, self.template.rocketmq_tail_text)


_FIRST = operator.itemgetter(0)
_SECOND = operator.itemgetter(1)
_OPAQUE = operator.attrgetter("opaque")
_QUEUE_ID = operator.attrgetter("queue_id")
_QUEUE_OFFSET = operator.attrgetter("queue_offset")


def _pack_rocketmq_answers(
    rows: Iterable[tuple[int, str, int, int]], code_language_version: bytes, id_length: int, tail: str
) -> bytes | None:
    """The ROCKETMQ frames of a group's SEND_OK answers in one buffer, from ``rows`` of (opaque, msg id, queue id,
    queue offset), every msg id ``id_length`` ASCII letters and digits: what the group has alike (code, language and
    version packed, the flag and remark, msgId's key and length byte, the template's ``tail``) given once, each
    answer's extFields one f-string (a third of the time of a % format) and its head one pack of six fields (a loop:
    `str.format` and `struct.pack` through `map`s took no bytecode an answer but 1.15-1.2x this loop's CPU, timeit).
    None for a queue id not in the table (the general way then). ``encode_answers`` (answer objects) and
    ``SentAnswers.encode`` (the store's results) both write through it."""
    id_field = f"\0\5msgId\0\0\0{chr(id_length)}"
    pack = _ROCKETMQ_ANSWER_HEAD.pack
    queue_fields = _QUEUE_ID_FIELDS
    flag_remark = _FLAG_REMARK
    parts: list[bytes] = []
    try:
        for opaque, msg_id, queue_id, offset in rows:
            offset = str(offset)
            ext = (
                f"{id_field}{msg_id}{queue_fields[queue_id]}\0\13queueOffset\0\0\0{chr(len(offset))}{offset}{tail}"
            ).encode("latin-1")
            elen = len(ext)
            parts += (pack(25 + elen, _WORD_ROCKETMQ + elen, code_language_version, opaque, flag_remark, elen), ext)
    except KeyError:  # a queue id not in the table
        return None
    return b"".join(parts)
