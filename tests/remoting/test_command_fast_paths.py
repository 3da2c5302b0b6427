"""``RemotingCommand``'s ROCKETMQ extFields fast paths give exactly what its field-by-field path gives, and its
errors: ``_binary_ext_fast`` reads the extFields without a check per field, ``_binary_ext_layout`` by a layout
learned from an earlier request of the same length, and each returns None whenever ``_binary_ext`` (a check per
field) would decode them differently or fail.

Each differential test draws thousands of variants, most of them malformed, from a fixed seed.
"""

from __future__ import annotations

import random
import struct

import pytest

from remoting import command as cmdmod
from remoting.command import RemotingCommand, equality_fields
from remoting.errors import RemotingCommandError


def _outcome(fn, *args):
    """What a decode gives: the command's fields, or the error's text, opaque, flag and type."""
    try:
        cmd = fn(*args)
    except RemotingCommandError as exc:
        return ("error", str(exc), exc.opaque, exc.flag, exc.serialize_type)
    return equality_fields(cmd)


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


@pytest.fixture(autouse=True)
def _fresh_layouts():
    """Each test starts with no learned layout (the tables are the module's)."""
    cmdmod._LAYOUTS.clear()
    cmdmod._LAYOUT_MISSES.clear()
    yield
    cmdmod._LAYOUTS.clear()
    cmdmod._LAYOUT_MISSES.clear()


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
    """RemotingCommand.decode of a ROCKETMQ frame with the fast extFields paths (layout, no checks) switched off."""
    fast, layout, whole = cmdmod._binary_ext_fast, cmdmod._match_layout, cmdmod._NO_REMARK_EXT
    cmdmod._binary_ext_fast = cmdmod._match_layout = lambda header, pos, end: None
    cmdmod._NO_REMARK_EXT = 1 << 40  # no header length maps to a learned layout: the header path is off too
    try:
        return RemotingCommand.decode(frame)
    finally:
        cmdmod._binary_ext_fast, cmdmod._match_layout, cmdmod._NO_REMARK_EXT = fast, layout, whole


def _without_header_layout(frame: bytes):
    """RemotingCommand.decode with the whole-header layout path off: the header goes to ``_decode_binary_fields``
    (whose extFields still come from ``_match_layout``)."""
    whole = cmdmod._NO_REMARK_EXT
    cmdmod._NO_REMARK_EXT = 1 << 40
    try:
        return RemotingCommand.decode(frame)
    finally:
        cmdmod._NO_REMARK_EXT = whole


def _full_outcome(fn, frame: bytes):
    """``_outcome`` and the layout and values a processor would read (the layout by identity)."""
    got = _outcome(fn, frame)
    if got[0] == "error":
        return got
    cmd = fn(frame)
    return (*got, id(cmd.ext_layout) if cmd.ext_layout is not None else None, cmd.ext_values)


def _java_v2_frame(queue_id: str = "0", uniq: str = "7F0000014E2A18B4AAC27D2F6B9E0000", remark: bytes = b"") -> bytes:
    """A SEND_MESSAGE_V2 header as RocketMQ's benchmark Producer sends it (ROCKETMQ, one-letter keys a..n)."""
    values = {
        "a": "benchmark_producer",
        "b": "BenchmarkTest",
        "c": "TBW102",
        "d": "4",
        "e": queue_id,
        "f": "0",
        "g": "1764021600123",
        "h": "0",
        "i": f"UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02",
        "j": "0",
        "k": "false",
        "l": "16",
        "m": "false",
        "n": "broker-a",
    }
    header = _rocketmq_header(_ext_bytes([(k.encode(), v.encode()) for k, v in values.items()]), remark)
    return struct.pack(">I", (1 << 24) | len(header)) + header


def test_the_second_request_of_a_length_teaches_its_layout_and_the_next_ones_use_it(monkeypatch) -> None:
    """Without the layout table every request would go through ``_binary_ext_fast``."""
    first = RemotingCommand.decode(_java_v2_frame("0"))
    assert not cmdmod._LAYOUTS  # one request of a length: nothing compiled for it
    RemotingCommand.decode(_java_v2_frame("1"))
    assert len(cmdmod._LAYOUTS) == 1
    monkeypatch.setattr(cmdmod, "_binary_ext_fast", lambda header, pos, end: pytest.fail("layout not used"))
    third = RemotingCommand.decode(_java_v2_frame("7", uniq="7F0000014E2A18B4AAC27D2F6B9E0042"))
    assert third.ext_fields == {**first.ext_fields, "e": "7", "i": third.ext_fields["i"]}
    assert third.ext_fields["i"].endswith("0042\x02WAIT\x01true\x02")
    assert list(third.ext_fields) == list("abcdefghijklmn")


def test_a_layout_is_only_used_where_it_reads_what_the_checked_path_reads() -> None:
    """Requests of a learned length that differ from its layout anywhere (a length, a key, a byte that is not
    ASCII, a remark moving the fields) decode to the checked path's command or error, thousands of variants."""
    rng = random.Random(9)
    layout_taken = 0
    for _ in range(300):
        keys = rng.sample([b"a", b"b", b"queueId", b"topic", b"k" * 40, b"m"], rng.randrange(2, 6))
        fields = [(k, bytes(rng.choice(b"0123456789abc") for _ in range(rng.randrange(0, 9)))) for k in keys]
        base = _ext_bytes(fields)
        cmdmod._LAYOUTS.clear()  # (a length keeps the first layouts learned for it: start afresh for each base)
        cmdmod._LAYOUT_MISSES.clear()
        for _ in range(2):  # teach it
            RemotingCommand.decode(struct.pack(">I", (1 << 24) | len(_rocketmq_header(base))) + _rocketmq_header(base))
        for _ in range(20):
            ext = bytearray(base)
            roll = rng.random()
            if roll < 0.3:  # any byte: a length, a key, a value (maybe not ASCII)
                ext[rng.randrange(len(ext))] = rng.randrange(256)
            elif roll < 0.5:  # values changed, lengths kept: the layout's case
                for i in range(len(ext)):
                    if rng.random() < 0.2 and 0x30 <= ext[i] <= 0x7A:
                        ext[i] = rng.choice(b"0123456789xyz")
            elif roll < 0.6:  # two fields swapped (same length overall, another layout)
                a, b = rng.sample(range(len(fields)), 2)
                swapped = list(fields)
                swapped[a], swapped[b] = swapped[b], swapped[a]
                ext = bytearray(_ext_bytes(swapped))
            elif roll < 0.7:  # one byte not ASCII (a value's, often)
                ext[rng.randrange(len(ext))] = rng.randrange(0x80, 0x100)
            header = _rocketmq_header(bytes(ext), b"r" if rng.random() < 0.1 else b"")
            frame = struct.pack(">I", (1 << 24) | len(header)) + header
            start = len(header) - len(ext)
            layout_taken += cmdmod._binary_ext_layout(header, start, len(header)) is not None
            assert _outcome(RemotingCommand.decode, frame) == _outcome(_checked_binary, frame), (fields, bytes(ext))
    assert layout_taken > 1500, layout_taken


def test_the_layout_tables_stay_bounded() -> None:
    """A peer sending ever new lengths (and, for one length, ever new layouts) cannot make the tables grow."""
    for n in range(1200):
        for _ in range(2):
            ext = _ext_bytes([(b"a", b"x" * n), (b"b", b"y")])
            header = _rocketmq_header(ext)
            RemotingCommand.decode(struct.pack(">I", (1 << 24) | len(header)) + header)
    assert len(cmdmod._LAYOUTS) <= cmdmod._LAYOUTS_MAX
    assert len(cmdmod._LAYOUT_MISSES) <= cmdmod._LAYOUTS_MAX
    for n in range(40):  # one length, many layouts
        for _ in range(2):
            ext = _ext_bytes([(b"a", b"x" * n), (b"b", b"y" * (40 - n))])
            header = _rocketmq_header(ext)
            RemotingCommand.decode(struct.pack(">I", (1 << 24) | len(header)) + header)
    assert all(len(layouts) <= cmdmod._LAYOUTS_PER_LENGTH for layouts in cmdmod._LAYOUTS.values())


def test_a_length_whose_layout_keeps_changing_stops_being_learned(monkeypatch) -> None:
    """Learning a layout costs more than reading the fields: requests of one length with a new layout each time
    are learned a few times, then read by ``_binary_ext_fast`` alone (to the same map)."""
    learned = []
    real = cmdmod._ExtLayout
    monkeypatch.setattr(cmdmod, "_ExtLayout", lambda ext, pos: learned.append(ext) or real(ext, pos))
    for n in range(200):
        fields = [(b"a", b"x" * (n % 40)), (b"b", b"y" * (40 - n % 40))]
        header = _rocketmq_header(_ext_bytes(fields))
        cmd = RemotingCommand.decode(struct.pack(">I", (1 << 24) | len(header)) + header)
        assert cmd.ext_fields == {"a": "x" * (n % 40), "b": "y" * (40 - n % 40)}
    assert len(learned) == cmdmod._LAYOUTS_PER_LENGTH


def test_the_whole_header_layout_reads_what_the_general_decode_reads() -> None:
    """``RemotingCommand.decode`` reads a remark-less ROCKETMQ header of a learned layout's length with one struct
    call; thousands of variants of the benchmark Producer's send (any byte of the fixed part, the remark and
    extFields lengths or the fields changed, a remark added, bytes that are not ASCII, a body or none) decode to
    the command, error, layout and values that ``_decode_binary_fields`` gives."""
    for queue_id in "01":  # teach it
        RemotingCommand.decode(_java_v2_frame(queue_id))
    rng = random.Random(15)
    taken = 0
    for n in range(4000):
        frame = bytearray(_java_v2_frame(str(n % 10), uniq=f"{n:032X}", remark=b"r" if rng.random() < 0.05 else b""))
        roll = rng.random()
        if roll < 0.3:  # any byte after the length word: the fixed part, a length, a key, a value
            frame[rng.randrange(4, len(frame))] = rng.randrange(256)
        elif roll < 0.4:  # a value's byte not ASCII
            frame[rng.randrange(len(frame) - 40, len(frame))] = rng.randrange(0x80, 0x100)
        elif roll < 0.5:  # the fixed part's numbers anything (code, language, version, opaque, flag)
            frame[4:21] = bytes(rng.randrange(256) for _ in range(17))
        if rng.random() < 0.3:
            frame += b"body" * rng.randrange(1, 4)
        frame = bytes(frame)
        for _ in range(2):  # whatever it teaches (a layout behind a remark, a new one) is learned before comparing
            _outcome(_without_header_layout, frame)
        fast = _full_outcome(RemotingCommand.decode, frame)
        assert fast == _full_outcome(_without_header_layout, frame), frame
        taken += fast[0] != "error" and fast[-1] is not None and fast[3] is None
    assert taken > 2000, taken


def test_a_header_of_a_learned_length_with_a_remark_is_not_read_by_the_whole_header_layout(monkeypatch) -> None:
    """A remark moves the extFields: such a header never matches the remark-less header struct, it takes the
    general decode (and a layout learned behind a remark is never used for the whole header)."""
    RemotingCommand.decode(_java_v2_frame("0", remark=b"rr"))
    RemotingCommand.decode(_java_v2_frame("1", remark=b"rr"))  # a layout at another position, same extFields length
    assert [layout.header_expected for layout in cmdmod._LAYOUTS.popitem()[1]] == [None]
    RemotingCommand.decode(_java_v2_frame("0"))
    RemotingCommand.decode(_java_v2_frame("1"))
    calls = []
    real = RemotingCommand._decode_binary_fields.__func__
    monkeypatch.setattr(
        RemotingCommand, "_decode_binary_fields", classmethod(lambda cls, h: calls.append(h) or real(cls, h))
    )
    plain = RemotingCommand.decode(_java_v2_frame("5"))
    assert not calls and plain.ext_layout is not None and plain.remark is None
    remarked = RemotingCommand.decode(_java_v2_frame("5", remark=b"rr"))
    assert len(calls) == 1 and remarked.remark == "rr" and remarked.ext_fields == plain.ext_fields
