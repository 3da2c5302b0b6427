"""``RemotingCommand``'s ROCKETMQ extFields fast path gives exactly what its field-by-field path gives, and its
errors: ``_binary_ext_fast`` reads the extFields without a check per field and returns None whenever
``_binary_ext`` (a check per field) would decode them differently or fail.

Each differential test draws thousands of variants, most of them malformed, from a fixed seed.
"""

from __future__ import annotations

import random
import struct

import pytest

from remoting import command as cmdmod
from remoting.command import RemotingCommand
from remoting.errors import RemotingCommandError


def _outcome(fn, *args):
    """What a decode gives: the command's fields, or the error's text, opaque, flag and type."""
    try:
        cmd = fn(*args)
    except RemotingCommandError as exc:
        return ("error", str(exc), exc.opaque, exc.flag, exc.serialize_type)
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


def _ext_bytes(fields) -> bytes:
    out = b""
    for key, value in fields:
        out += struct.pack(">H", len(key)) + key + struct.pack(">i", len(value)) + value
    return out


def _rocketmq_header(ext: bytes, remark: bytes = b"") -> bytes:
    fixed = struct.pack(">hbhii", 310, 0, 409, 7, 0)
    return fixed + struct.pack(">i", len(remark)) + remark + struct.pack(">i", len(ext)) + ext


def _ext_outcome(fn, header: bytes, pos: int, end: int):
    try:
        return ("ok", fn(header, pos, end))
    except RemotingCommandError as exc:
        return ("error", str(exc))
    except UnicodeDecodeError as exc:
        return ("unicode", str(exc))


def _both_ext(header: bytes, pos: int, end: int):
    ext = cmdmod._binary_ext_fast(header, pos, end)
    return ext if ext is not None else cmdmod._binary_ext(header, pos, end)


def _mutate(rng: random.Random, ext: bytearray) -> None:
    roll = rng.random()
    if roll < 0.25 and ext:  # a random byte (a length, often)
        ext[rng.randrange(len(ext))] = rng.randrange(256)
    elif roll < 0.4 and ext:  # truncated
        del ext[rng.randrange(len(ext)) :]
    elif roll < 0.5:  # trailing bytes
        ext += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 4)))
    elif roll < 0.6:  # a negative length
        ext += struct.pack(">h", 1) + b"z" + struct.pack(">i", -rng.randrange(1, 9)) + b"v"


def test_a_java_rocketmq_header_takes_the_fast_path() -> None:
    fields = [(k.encode(), v.encode()) for k, v in {"a": "producer", "b": "Topic", "g": "1764021600123"}.items()]
    ext = _ext_bytes(fields)
    header = _rocketmq_header(ext)
    start = len(header) - len(ext)
    assert cmdmod._binary_ext_fast(header, start, len(header)) == {"a": "producer", "b": "Topic", "g": "1764021600123"}


def test_rocketmq_ext_fast_path_matches_the_checked_one() -> None:
    rng = random.Random(15)
    alphabet = [b"a", b"bb", b"queueId", b"\xc3\xa9", b"\xff", b"x" * 200, b""]
    outcomes = {"ok": 0, "error": 0, "unicode": 0}
    fast_taken = 0
    for _ in range(6000):
        fields = [(rng.choice(alphabet), rng.choice(alphabet) * rng.randrange(1, 3)) for _ in range(rng.randrange(5))]
        if rng.random() < 0.2 and fields:  # a key sent twice
            fields.append((fields[0][0], rng.choice(alphabet)))
        ext = bytearray(_ext_bytes(fields))
        if rng.random() < 0.6:
            _mutate(rng, ext)
        header = _rocketmq_header(bytes(ext), rng.choice([b"", b"remark"]))
        start = len(header) - len(ext)
        end = len(header) - rng.choice([0, 0, 0, 1, 3]) if len(ext) > 3 else len(header)
        got = _ext_outcome(_both_ext, header, start, end)
        assert got == _ext_outcome(cmdmod._binary_ext, header, start, end), (fields, bytes(ext), end)
        outcomes[got[0]] += 1
        fast_taken += cmdmod._binary_ext_fast(header, start, end) is not None
        # and the whole frame decodes to the same command or error
        frame = struct.pack(">I", (1 << 24) | len(header)) + header
        assert _outcome(RemotingCommand.decode, frame) == _outcome(_checked_binary, frame)
    assert min(outcomes.values()) > 300 and fast_taken > 1000, outcomes


@pytest.mark.parametrize("klen", [0x7FFF, 0x8000, 0xFFFF])
def test_a_key_length_negative_as_int16_is_refused_by_both(klen: int) -> None:
    """A key of 32 KiB or more has a negative int16 length: the checked path refuses it; read unsigned it would
    fit a header large enough, so the fast path must hand it over."""
    ext = _ext_bytes([(b"k" * klen, b"v")])
    header = _rocketmq_header(ext)
    start = len(header) - len(ext)
    got = _ext_outcome(_both_ext, header, start, len(header))
    assert got == _ext_outcome(cmdmod._binary_ext, header, start, len(header))
    assert got[0] == ("ok" if klen == 0x7FFF else "error")


def _checked_binary(frame: bytes):
    """RemotingCommand.decode of a ROCKETMQ frame with the fast extFields path switched off."""
    fast = cmdmod._binary_ext_fast
    cmdmod._binary_ext_fast = lambda header, pos, end: None
    try:
        return RemotingCommand.decode(frame)
    finally:
        cmdmod._binary_ext_fast = fast
