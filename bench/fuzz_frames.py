"""A seeded generator of malformed and mutated remoting frames: what a careless or hostile client could send.

``FrameMutator(seed)`` yields ``FuzzFrame``s, whole wire frames (the 4-byte total length included), from
five families, so that every layer between the socket and the store sees bad input:

* ``framing``: total lengths that lie (zero, negative, above the 16 MiB cap, shorter or longer than the
  bytes that follow), header lengths past the frame, unknown serialization-type bytes, truncated frames.
  The server is expected to close such a connection, so these go on a throwaway connection.
* ``header``: a JSON or ROCKETMQ header for any request code, the served ones and unknown ones, whose
  fields are dropped, emptied, of the wrong type (JSON numbers, booleans, arrays, objects, null where a
  string belongs), out of range, huge, or hold NUL and newline; plus header-level lies (code as text,
  opaque out of range, an extFields array, invalid JSON, ROCKETMQ lengths that overrun).
* ``body``: a plausible header and a body of the kind the code takes (message, batch, heartbeat, lock
  batch, check client config, register broker, subscription group, broker config properties), then
  mutated: JSON values replaced by wrong types, batch element lengths that lie, random bytes (``bench.fuzz_bodies``).
* ``corpus``: a frame recorded from a real client (``tests/fuzz/corpus/*.frames``) mutated at the byte
  level (bit flips, cuts, splices, keeping the length prefix honest) or field by field.
* ``valid``: an untouched corpus or template frame, so that state the mutants need (groups, topics,
  consumers) exists.

Names come from small pools (``bench.fuzz_vocab``): the fuzz topics and groups, upstream's reserved ones and
illegal ones, never the broker's own name or cluster, so a fuzz run cannot take over the route of the topics it
does not own.
The generator touches nothing but a ``random.Random``; the same seed gives the same frames.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.fuzz_bodies import BODY_CODES, BodyMaker, mutate_bytes
from bench.fuzz_vocab import (
    EXPRESSIONS,
    FIELD_KINDS,
    FUZZ_BROKER_NAMES,
    FUZZ_CLUSTERS,
    FUZZ_GROUPS,
    FUZZ_TOPICS,
    ILLEGAL_NAMES,
    NAMESRV_CODES,
    PROPERTY_NAMES,
    REQUEST_CODES,
    STATS_NAMES,
    SYSTEM_GROUPS,
    SYSTEM_TOPICS,
)
from remoting.codes import RequestCode
from remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from remoting.errors import RemotingCommandError
from remoting.frame import DEFAULT_FRAME_MAX, FrameDecoder

CORPUS_DIR = Path(__file__).resolve().parent.parent / "tests" / "fuzz" / "corpus"

_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class FuzzFrame:
    """Bytes to write as they are; ``closes``: the server should drop the connection after them."""

    data: bytes
    family: str
    code: int | None
    closes: bool = False


def load_corpus(directory: Path = CORPUS_DIR, target: str = "broker") -> list[bytes]:
    """Every frame recorded for ``target`` ("broker" or "namesrv"): the ``*_<target>.frames`` files in
    ``directory``, each a client-to-server byte stream as a recording proxy saw it."""
    frames: list[bytes] = []
    for path in sorted(directory.glob(f"*_{target}.frames")):
        decoder = FrameDecoder(max_frame=DEFAULT_FRAME_MAX)
        for frame in decoder.feed(path.read_bytes()):
            frames.append(_I32.pack(len(frame)) + bytes(frame))
    return frames


class FrameMutator(BodyMaker):
    """Deterministic frame source: ``FrameMutator(seed).frames(n)``; ``target`` is "broker" or "namesrv"."""

    def __init__(
        self,
        seed: int | str,
        corpus: Sequence[bytes] = (),
        *,
        target: str = "broker",
        large_bodies: bool = False,
        illegal_names: Sequence[str] = ILLEGAL_NAMES,
    ) -> None:
        self.rng = random.Random(seed)
        self.illegal_names = tuple(illegal_names) or ("FuzzT0",)
        self.corpus = [f for f in corpus if self._decodes(f)]
        self.target = target
        self.large_bodies = large_bodies
        self.opaque = 1_000_000

    @staticmethod
    def _decodes(frame: bytes) -> bool:
        try:
            RemotingCommand.decode(frame[4:])
        except Exception:  # noqa: BLE001 - a corpus file may hold a frame our decoder refuses; skip it
            return False
        return True

    def frames(self, count: int) -> Iterator[FuzzFrame]:
        for _ in range(count):
            yield self.next()

    def next(self) -> FuzzFrame:
        r = self.rng.random()
        if r < 0.05:
            return self._framing()
        if r < 0.40:
            frame = self._header()
        elif r < 0.70:
            frame = self._body()
        elif r < 0.92 and self.corpus:
            frame = self._corpus_mutant()
        else:
            frame = self._valid()
        if not frame.closes and _closes_connection(frame.data):
            return FuzzFrame(frame.data, frame.family, frame.code, closes=True)
        return frame

    # -- pools ------------------------------------------------------------------------------------
    def _code(self) -> int:
        rng = self.rng
        r = rng.random()
        if r < 0.05:
            return rng.choice((-1, 0, 1, 9999, 32767, -32768, 65535, 2**31, 400, 5000, 5002))
        if self.target == "namesrv" and r < 0.75:
            return rng.choice(NAMESRV_CODES)
        if r < 0.45:
            return rng.choice(tuple(FIELD_KINDS))
        return rng.choice(REQUEST_CODES)

    def _name(self, pool: Sequence[str]) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.12:
            return rng.choice(self.illegal_names)
        if r < 0.2:
            return rng.choice(SYSTEM_TOPICS)
        return rng.choice(pool)

    def _value(self, kind: str) -> str:
        rng = self.rng
        if kind == "topic":
            return self._name(FUZZ_TOPICS)
        if kind == "deftopic":
            return rng.choice(("TBW102", "TBW102", "FuzzT0", ""))
        if kind == "group":
            r = rng.random()
            if r < 0.1:
                return rng.choice(SYSTEM_GROUPS)
            return self._name(FUZZ_GROUPS)
        if kind == "qid":
            return str(rng.choice((0, 0, 1, 2, 3, 7, 8, 15, 16, -1, 255, 1024, 2**31 - 1)))
        if kind == "qnum":
            return str(rng.choice((1, 4, 8, 16, 0, -1, 1025, 65536)))
        if kind == "offset":
            return str(rng.choice((0, 0, 1, 5, 100, -1, 2**31, 2**63 - 1, rng.randrange(0, 1 << 20))))
        if kind == "int":
            return str(rng.choice((0, 1, 2, 3, 16, 18, 19, 32, -1, -(2**31), 2**31 - 1)))
        if kind == "ts":
            return str(rng.choice((0, 1_700_000_000_000, 4_102_444_800_000, -1, 2**63 - 1)))
        if kind == "bool":
            return rng.choice(("true", "false", "TRUE", "1", "0", "yes", ""))
        if kind == "sysflag":
            return str(rng.choice((0, 0, 1, 2, 4, 8, 16, 32, 0x10 | 0x4, 0xFF, -1)))
        if kind == "pullflag":
            return str(rng.choice((0, 1, 2, 3, 4, 6, 7, 8, 15, -1)))
        if kind == "suspend":
            return str(rng.choice((0, 1, 5, 20, 100)))
        if kind == "tranflag":
            return str(rng.choice((0, 4, 8, 12, 1, -1)))
        if kind == "props":
            return self._properties()
        if kind == "expr":
            return rng.choice(EXPRESSIONS)
        if kind == "exprtype":
            return rng.choice(("TAG", "SQL92", "", "sql92", "XPATH"))
        if kind == "perm":
            return str(rng.choice((6, 2, 4, 7, 0, 1, -1, 255)))
        if kind == "aclperm":
            return rng.choice(("PUB", "SUB", "PUB|SUB", "DENY", "x", ""))
        if kind == "filtertype":
            return rng.choice(("SINGLE_TAG", "MULTI_TAG", "", "X"))
        if kind == "client":
            return rng.choice(("127.0.0.1@fuzz", "127.0.0.1@fuzz2", "", "x" * 300, "c\u0000"))
        if kind == "msgid":
            return rng.choice(
                (
                    "7F00000100002A9F0000000000000000",
                    "7F00000100002A9F00000000000000ZZ",
                    "",
                    "abc",
                    "AC11000100002A9F",
                    "0" * 40,
                    "7F000001" + "F" * 24,
                )
            )
        if kind == "key":
            return rng.choice(("k", "", "key 1", "x" * 200, "\u0000", "ORDER_TOPIC_CONFIG", "a=b"))
        if kind == "brokername":
            return rng.choice(FUZZ_BROKER_NAMES + ("", "x" * 300))
        if kind == "cluster":
            return rng.choice(FUZZ_CLUSTERS + ("", "C\u0000"))
        if kind == "addr":
            return rng.choice(("127.0.0.1:1", "127.0.0.1:99999", "", "::1", "x:y", "127.0.0.1", "*"))
        if kind == "brokerid":
            return str(rng.choice((0, 1, 2, -1, 2**63 - 1)))
        if kind == "statsname":
            return rng.choice(STATS_NAMES)
        return "x"

    def _properties(self) -> str:
        rng = self.rng
        parts = []
        for _ in range(rng.randrange(0, 5)):
            name = rng.choice(PROPERTY_NAMES)
            value = rng.choice(
                (
                    "1",
                    "abc",
                    "",
                    "-1",
                    "19",
                    "99",
                    "TagA",
                    "k1 k2",
                    "true",
                    "2147483648",
                    str(rng.randrange(0, 10**6)),
                    "FuzzT0",
                    "\u0000",
                )
            )
            parts.append(f"{name}\x01{value}\x02")
        text = "".join(parts)
        r = rng.random()
        if r < 0.05:
            text += "dangling\x01"
        elif r < 0.1:
            text = "\x02\x01\x01\x02"
        return text

    # -- families -----------------------------------------------------------------------------------
    def _next_opaque(self) -> int:
        self.opaque += 1
        return self.opaque

    def _ext(self, code: int) -> dict[str, str]:
        kinds = FIELD_KINDS.get(code)
        if kinds is None:
            return (
                {self.rng.choice(("topic", "group", "x", "consumerGroup")): self._value("topic")}
                if self.rng.random() < 0.5
                else {}
            )
        return {name: self._value(kind) for name, kind in kinds.items()}

    def _command(
        self, code: int, ext: dict[str, str], body: bytes | None, serialize_type: int | None = None, flag: int = 0
    ) -> RemotingCommand:
        cmd = RemotingCommand.request(code, ext, body, opaque=self._next_opaque())
        cmd.flag = flag
        cmd.serialize_type = serialize_type if serialize_type is not None else (1 if self.rng.random() < 0.3 else 0)
        if not -32768 <= code <= 32767:
            cmd.serialize_type = 0  # the ROCKETMQ header has an int16 code: only JSON can carry this one
        cmd.language = self.rng.choice(("JAVA", "CPP", "GO", "PYTHON"))
        return cmd

    def _valid(self) -> FuzzFrame:
        if self.corpus and self.rng.random() < 0.6:
            frame = self.rng.choice(self.corpus)
            return FuzzFrame(frame, "valid", self._code_of(frame))
        code = self._code()
        cmd = self._command(code, self._ext(code), self._body_for(code))
        return FuzzFrame(cmd.to_bytes(), "valid", code)

    def _header(self) -> FuzzFrame:
        rng = self.rng
        code = self._code()
        ext: dict = self._ext(code)
        for _ in range(rng.randrange(1, 4)):
            self._mutate_ext(ext)
        body = self._body_for(code) if rng.random() < 0.5 else None
        flag = rng.choice((0, 0, 0, 0, FLAG_ONEWAY, FLAG_RESPONSE, 0xFF, -1, 4))
        if rng.random() < 0.45:
            return FuzzFrame(self._json_frame(code, ext, body, flag), "header", code)
        cmd = self._command(
            code, {k: str(v) for k, v in ext.items()}, body, serialize_type=1, flag=flag if 0 <= flag < 2**31 else 0
        )
        try:
            data = cmd.to_bytes()
        except Exception:  # noqa: BLE001 - an unencodable mutant (a code beyond int16): send it as JSON
            return FuzzFrame(self._json_frame(code, ext, body, flag), "header", code)
        if rng.random() < 0.3:
            data = self._lie_in_rocketmq_header(data)
        return FuzzFrame(data, "header", code)

    def _mutate_ext(self, ext: dict) -> None:
        rng = self.rng
        if not ext or rng.random() < 0.1:
            ext[rng.choice(("topic", "group", "queueId", "unknownField", "", "a" * 100))] = "x"
            return
        key = rng.choice(sorted(ext))
        r = rng.random()
        if r < 0.2:
            del ext[key]
        elif r < 0.3:
            ext[key] = ""
        elif r < 0.55:
            ext[key] = rng.choice(
                (
                    0,
                    -1,
                    1.5,
                    2**64,
                    -(2**63) - 1,
                    True,
                    False,
                    None,
                    [],
                    {},
                    ["x"],
                    {"a": 1},
                    "1e3",
                    "0x10",
                    " 1",
                    "1 ",
                    "NaN",
                    "١٢",
                )
            )
        elif r < 0.7:
            ext[key] = rng.choice(
                ("-1", "-2147483649", "2147483648", "9223372036854775808", "99999999999999999999999999", "-0", "+5")
            )
        elif r < 0.85:
            ext[key] = rng.choice(self.illegal_names)
        else:
            ext[key] = "Z" * rng.choice((1024, 1024, 1024, 70_000))

    def _json_frame(self, code: int, ext: dict, body: bytes | None, flag: int) -> bytes:
        rng = self.rng
        header: dict = {
            "code": code,
            "extFields": ext,
            "flag": flag,
            "language": rng.choice(("JAVA", "CPP", "X")),
            "opaque": self._next_opaque(),
            "serializeTypeCurrentRPC": "JSON",
            "version": 409,
        }
        r = rng.random()
        if r < 0.05:
            header["code"] = rng.choice((str(code), None, [code], 1.5, 2**40))
        elif r < 0.1:
            header["opaque"] = rng.choice(("1", None, 2**40, -1, 1.5))
        elif r < 0.15:
            header["extFields"] = rng.choice(([], "x", None, 1, [["topic", "x"]]))
        elif r < 0.2:
            header["version"] = rng.choice(("x", None, 2**40, -5))
        elif r < 0.25:
            header["remark"] = rng.choice(("r" * 100_000, "r" * 100, None, 1, {"x": 1}))
        elif r < 0.28:
            header["flag"] = rng.choice(("1", None, 2**40, 1.5))
        elif r < 0.3:
            del header[rng.choice(sorted(header))]
        try:
            text = json.dumps(header).encode()
        except (TypeError, ValueError):
            text = b"{}"
        r = rng.random()
        if r < 0.04:
            text = text[: rng.randrange(0, len(text) + 1)]
        elif r < 0.06:
            text = rng.choice((b"[]", b"null", b"1", b'"x"', b'{"code":', b"\xff\xfe", b"{}" * 3))
        return _frame(0, text, body or b"")

    def _lie_in_rocketmq_header(self, data: bytes) -> bytes:
        """Overwrite one of the ROCKETMQ header's inner length fields with a lie (remark, ext, a key)."""
        rng = self.rng
        hlen = _U32.unpack_from(data, 4)[0] & 0xFFFFFF
        header = bytearray(data[8 : 8 + hlen])
        # code(2) language(1) version(2) opaque(4) flag(4) then remark length at 13
        if len(header) < 17:
            return data
        pos = rng.choice((13, 13, len(header) - 4 if len(header) > 21 else 13))
        header[pos : pos + 4] = _I32.pack(rng.choice((-1, 0, 1, 2**31 - 1, len(header), len(header) + 1, 65536)))
        if rng.random() < 0.3:
            header[2] = rng.randrange(0, 256)  # language byte: an unknown language
        return _frame(1, bytes(header), data[8 + hlen :])

    def _body(self) -> FuzzFrame:
        rng = self.rng
        code = (
            rng.choice(tuple(BODY_CODES))
            if self.target == "broker" or rng.random() < 0.3
            else int(RequestCode.REGISTER_BROKER)
        )
        ext = self._ext(code)
        if rng.random() < 0.2:
            self._mutate_ext(ext)
        body = self._body_for(code)
        r = rng.random()
        if r < 0.6:
            body = self._mutate_body(body)
        cmd = self._command(code, {k: str(v) for k, v in ext.items()}, body)
        return FuzzFrame(cmd.to_bytes(), "body", code)

    def _code_of(self, frame: bytes) -> int | None:
        try:
            return RemotingCommand.decode(frame[4:]).code
        except Exception:  # noqa: BLE001
            return None

    def _corpus_mutant(self) -> FuzzFrame:
        rng = self.rng
        frame = rng.choice(self.corpus)
        code = self._code_of(frame)
        if rng.random() < 0.5:
            cmd = RemotingCommand.decode(frame[4:])
            cmd.opaque = self._next_opaque()
            ext = dict(cmd.ext_fields)
            for _ in range(rng.randrange(1, 3)):
                self._mutate_ext(ext)
            if cmd.body and rng.random() < 0.5:
                cmd.body = self._mutate_body(bytes(cmd.body))
            if rng.random() < 0.5:
                return FuzzFrame(self._json_frame(cmd.code, ext, cmd.body, cmd.flag), "corpus", code)
            cmd.ext_fields = {str(k): ("" if v is None else str(v)) for k, v in ext.items()}
            return FuzzFrame(cmd.to_bytes(), "corpus", code)
        payload = frame[4:]
        if rng.random() < 0.25 and len(self.corpus) > 1:
            other = rng.choice(self.corpus)[4:]
            cut = rng.randrange(0, len(payload) + 1)
            payload = payload[:cut] + other[rng.randrange(0, len(other) + 1) :]
        else:
            payload = mutate_bytes(rng, payload)
        if not payload:
            payload = b"\0"
        return FuzzFrame(_I32.pack(len(payload)) + payload, "corpus", code)

    def _framing(self) -> FuzzFrame:
        rng = self.rng
        cmd = self._command(int(RequestCode.GET_BROKER_RUNTIME_INFO), {}, b"body")
        good = cmd.to_bytes()
        payload = good[4:]
        r = rng.randrange(9)
        if r == 0:
            data = _I32.pack(rng.choice((0, -1, -(2**31)))) + payload
        elif r == 1:
            data = _I32.pack(rng.choice((DEFAULT_FRAME_MAX + 1, 2**31 - 1, 64 * 1024 * 1024))) + payload
        elif r == 2:
            data = _I32.pack(len(payload) + rng.randrange(1, 64)) + payload  # longer than sent: waits, then EOF
        elif r == 3:
            data = _I32.pack(max(1, len(payload) - rng.randrange(1, 8))) + payload  # shorter: garbage follows
        elif r == 4:
            data = _frame(rng.randrange(2, 256), payload[4 : 4 + (_U32.unpack_from(payload)[0] & 0xFFFFFF)], b"")
        elif r == 5:
            data = _I32.pack(len(payload)) + _U32.pack((rng.randrange(2) << 24) | 0xFFFFFF) + payload[4:]
        elif r == 6:
            data = good[: rng.randrange(1, len(good))]  # truncated, then the connection closes
        elif r == 7:
            data = _I32.pack(rng.choice((1, 2, 3))) + b"\x00" * 3
        else:
            data = rng.randbytes(rng.randrange(1, 200))
        return FuzzFrame(data, "framing", None, closes=True)


def _closes_connection(data: bytes) -> bool:
    """Whether the server drops the connection at this frame (a header too broken to answer: no opaque).

    Such a frame goes on a connection of its own: the frames written after it on a shared connection would
    be thrown away unread, and the run would test far fewer frames than it counts.
    """
    if len(data) < 8 or _I32.unpack_from(data)[0] != len(data) - 4:
        return True
    try:
        RemotingCommand.decode(data[4:])
    except RemotingCommandError as exc:
        return exc.opaque is None or bool(exc.flag & FLAG_RESPONSE)
    except Exception:  # noqa: BLE001 - the server's decoder would fail the same way
        return True
    return False


def _frame(serialize_type: int, header: bytes, body: bytes) -> bytes:
    return _I32.pack(4 + len(header) + len(body)) + _U32.pack((serialize_type << 24) | len(header)) + header + body
