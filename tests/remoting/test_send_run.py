"""``remoting.send_run``: a run of SEND_MESSAGE_V2 frames of one learned layout read by one compiled function.

Pinned against the frame-at-a-time path it replaces: every frame the reader takes is the command ``decode_at``
makes of it (every field, the layout, its values) with the header the send processor's ``groupable`` keeps on it,
and it stops exactly at the first frame that is not a plain single send its common path reads (a response, a
oneway, a remark, another code or layout, a batch, a number that is not a small int's canonical text, a non-ASCII
value, a cut or oversized frame). Through a connection (``RemotingProtocol``), random streams of such frames among
other requests, responses and damaged frames, cut by random reads and in-flight bounds, hand over the same runs of
the same commands whether the dispatcher lets the reader read them (``reads_sends``) or is asked of every request.
"""

from __future__ import annotations

import random
import struct
from types import SimpleNamespace

from remoting_helpers import JAVA_SEND_V2
from test_protocol_split import _damage, _request

from bench.null_transport import NullTransport
from broker.processor.send import SendMessageProcessor
from remoting import command as cmdmod
from remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand, equality_fields
from remoting.protocol import RemotingProtocol
from remoting.send_header import SendHeaderValues
from remoting.send_run import reader

_FRAME_MAX = 1 << 16
# values of each field's length in JAVA_SEND_V2 (the layout kept), the common ones first
_SAME = {
    "b": ["BenchmarkTest", "BenchmarkTesu", "BenchmarkTe\u00e9"],  # (the last: 13 bytes in UTF-8, not ASCII)
    "d": ["4", "4", "9", "x", "-", " "],
    "e": ["3", "0", "7", "x", "+"],
    "f": ["0", "1", "x"],
    "g": ["1764021600123", "9999999999999", "17640216001a3", "+764021600123", "0000000000000"],
    "h": ["0", "5", "\u00e9"[:1]],
    "j": ["0", "2", "y"],
    "k": ["false", "FALSE", "fals0"],
    "l": ["16", "99", "07", "-1", "ab"],
    "m": ["false", "False", "xxxxx"],
}
# values of another length (another layout)
_OTHER = {"e": ["12"], "m": ["true", ""], "g": ["17640216001234"], "l": ["255"], "b": ["T"]}


def _common(ext: dict[str, str]) -> bool:
    """Whether the reader's common path reads these values (the rest it leaves to the general path)."""
    if any(ext[k] not in (str(i) for i in range(256)) for k in "defhjl"):
        return False
    if ext["k"] not in ("true", "false") or ext["m"] != "false" or not ext["g"].isdigit():
        return False
    return "".join(ext.values()).isascii()


def _send(rng: random.Random, opaque: int, odd: float) -> tuple[bytes, tuple[str, int] | None]:
    """A SEND_MESSAGE_V2 frame, mostly the benchmark Producer's, and the language and version of the readers that
    should take it (None: no reader should)."""
    ext = dict(JAVA_SEND_V2)
    for key in ext:
        if rng.random() < odd:
            ext[key] = rng.choice(_OTHER.get(key, []) + _SAME.get(key, [ext[key]]) * 3)
    code = 310 if rng.random() > odd / 2 else rng.choice((10, 11, 320))
    flag = 0 if rng.random() > odd / 2 else rng.choice((FLAG_ONEWAY, FLAG_RESPONSE))
    remark = None if rng.random() > odd / 4 else "r"
    body = rng.choice((b"x" * rng.randrange(1, 40), b"")) if rng.random() < 0.5 else b"hello"
    language = "JAVA" if rng.random() > odd / 2 else "CPP"
    version = 409 if rng.random() > odd / 2 else 317
    cmd = RemotingCommand(code, opaque, flag, remark, ext, body or None, language, version, 1)
    same_layout = all(len(ext[k].encode()) == len(v.encode()) for k, v in JAVA_SEND_V2.items())
    plain = code == 310 and flag == 0 and remark is None and same_layout and _common(ext)
    return cmd.to_bytes(), (language, version) if plain else None


def _learn() -> RemotingCommand:
    """The benchmark Producer's send as decode_at reads it once its layout is learned."""
    frame, _ = _send(random.Random(0), 1, 0.0)
    for _ in range(3):
        cmd = RemotingCommand.decode_at(frame, 4, len(frame))
    assert cmd.ext_layout is not None
    return cmd


_PROCESSOR = SimpleNamespace(config=SimpleNamespace(fault_injection_enable=False), _header=SendMessageProcessor._header)


def _groupable(request: RemotingCommand) -> bool:
    """The send processor's ``groupable`` (with fault injection off): its answer and the header it keeps."""
    return SendMessageProcessor.groupable(_PROCESSOR, request)  # type: ignore[arg-type]


def _fields(cmd: RemotingCommand) -> tuple:
    header = cmd.custom_header
    return (
        equality_fields(cmd),
        type(cmd.body),
        cmd.ext_layout,
        cmd.ext_values,
        header,
        type(header),
        None if header is None else tuple(type(getattr(header, name)) for name in SendHeaderValues._fields),
    )


def _reader_for(layout: cmdmod._ExtLayout, language: str = "JAVA", version: int = 409):  # noqa: ANN202
    return reader(SimpleNamespace(ext_layout=layout, language=language, version=version))  # type: ignore[arg-type]


def test_the_reader_takes_what_decode_at_and_groupable_make_and_stops_at_the_first_other_frame() -> None:
    cmdmod._LAYOUTS.clear()
    cmdmod._LAYOUT_MISSES.clear()
    layout = _learn().ext_layout
    readers = {key: _reader_for(layout, *key) for key in (("JAVA", 409), ("CPP", 317))}
    assert None not in readers.values()
    rng = random.Random(1513)
    taken_total = 0
    for trial in range(1500):
        key = rng.choice(list(readers))
        read = readers[key]
        odd = rng.choice((0.0, 0.02, 0.1, 0.3))
        frames = [_send(rng, trial * 100 + n, odd) for n in range(rng.randrange(1, 20))]
        stream = b"".join(frame for frame, _ in frames)
        cut = rng.choice((len(stream), len(stream), rng.randrange(len(stream) + 1)))
        buf = stream[:cut]
        room = rng.choice((1, 3, 64))
        run: list[RemotingCommand] = []
        pos = read(buf, 0, len(buf), room, run)
        # the reference: frame by frame, decode_at and groupable
        at = 0
        for i, (frame, taken) in enumerate(frames):
            whole = at + len(frame) <= cut
            if i >= room or not (taken == key and whole):
                assert len(run) == i and pos == at, (trial, i)
                break
            ref = RemotingCommand.decode_at(buf, at + 4, at + len(frame))
            assert _groupable(ref) and ref.custom_header is not None
            assert _fields(run[i]) == _fields(ref), (trial, i)
            assert run[i] == ref and ref == run[i]
            at += len(frame)
        else:
            assert len(run) == len(frames) and pos == at
        taken_total += len(run)
    assert taken_total > 800, taken_total


def test_a_layout_of_other_keys_or_behind_a_remark_has_no_reader() -> None:
    assert _reader_for(cmdmod._ExtLayout({"topic": "T", "queueId": "1"}, cmdmod._NO_REMARK_EXT)) is None
    assert _reader_for(cmdmod._ExtLayout(dict(JAVA_SEND_V2), cmdmod._NO_REMARK_EXT + 3)) is None
    missing = dict(JAVA_SEND_V2)
    del missing["g"]  # (a required field)
    assert _reader_for(cmdmod._ExtLayout(missing, cmdmod._NO_REMARK_EXT)) is None
    optional = dict(JAVA_SEND_V2)
    for key in "ijklmn":
        del optional[key]
    assert _reader_for(cmdmod._ExtLayout(optional, cmdmod._NO_REMARK_EXT)) is not None
    layout = cmdmod._ExtLayout(dict(JAVA_SEND_V2), cmdmod._NO_REMARK_EXT)
    # one reader per language and version, kept; a few per layout at most
    assert _reader_for(layout) is _reader_for(layout) is not _reader_for(layout, "CPP")
    assert [_reader_for(layout, "JAVA", v) is None for v in range(10)] == [False] * 6 + [True] * 4


def _processed_header(request: RemotingCommand) -> object:
    if request.code not in (10, 310):
        return None
    try:
        header = SendMessageProcessor._header(request)
    except Exception as exc:  # noqa: BLE001 - the same error either way
        return repr(exc)
    return header, tuple(type(getattr(header, name)) for name in SendHeaderValues._fields)


class _Sends:
    """A dispatcher whose check is the send processor's ``groupable`` (fault injection off, or on after a request
    that flips it is dispatched: as the broker's switch read per request), for SEND_MESSAGE_V2 and SEND_MESSAGE."""

    def __init__(self) -> None:
        self.handed: list[tuple] = []
        self.off = False
        self.protocol: RemotingProtocol | None = None

    def check(self, request: RemotingCommand) -> bool:
        return not self.off and _groupable(request)

    def grouping(self, code: int):  # noqa: ANN201
        return self.check if code in (10, 310) else None

    def dispatch(self, channel, request: RemotingCommand) -> None:  # noqa: ANN001
        # (a lone request's header as the processor will read it: the reader keeps it on every send it reads, also
        # on a read's first one that the check then refuses, which the processor then decodes from its values)
        self.handed.append(("one", _fields(request)[:-3], _processed_header(request)))
        if self.protocol is not None:
            self.protocol.request_started()
        if request.code not in (10, 310, 320) and request.opaque % 3 == 0:
            self.off = not self.off

    def dispatch_many(self, channel, requests: list[RemotingCommand]) -> None:  # noqa: ANN001
        self.handed.append(("many", [_fields(r) for r in requests]))
        if self.protocol is not None:
            self.protocol.requests_started(len(requests))

    def channel_connected(self, channel) -> None:  # noqa: ANN001
        pass

    def channel_error(self, channel, exc) -> None:  # noqa: ANN001
        pass

    def channel_closed(self, channel, exc) -> None:  # noqa: ANN001
        pass


class _ReadingSends(_Sends):
    def reads_sends(self, code: int) -> bool:
        return code == 310


def _trial(
    dispatcher: _Sends,
    trial: int,
    stream: bytes,
    reads: list[int],
    max_inflight: int,
    frame_max: int,
    held: frozenset[int] = frozenset(),
) -> tuple:
    """``held``: the reads after which the requests in flight are not finished yet (reading may stay paused)."""
    transport = NullTransport(keep=True)
    protocol = RemotingProtocol(dispatcher, trial, frame_max=frame_max, max_inflight=max_inflight)
    dispatcher.protocol = protocol
    protocol.connection_made(transport)
    pos = 0
    for i, cut in enumerate(reads):
        chunk = stream[pos:cut]
        protocol.data_received(chunk if i % 4 else bytearray(chunk))
        pos = cut
        if i in held and i + 1 < len(reads):
            continue
        while protocol.inflight and not transport.closed:
            protocol.requests_finished(protocol.inflight)
            protocol._deferred_process()
    assert protocol.channel is not None
    protocol.channel.flush()
    return dispatcher.handed, b"".join(transport.chunks), transport.closed


async def test_a_connection_hands_over_the_same_runs_with_the_reader_as_asking_each_request() -> None:
    cmdmod._LAYOUTS.clear()
    cmdmod._LAYOUT_MISSES.clear()
    _learn()
    rng = random.Random(15130)
    read_by_reader = 0
    for trial in range(300):
        frames = []
        for n in range(rng.randrange(1, 60)):
            opaque = trial * 1000 + n
            if rng.random() < 0.85:
                frame, _ = _send(rng, opaque, rng.choice((0.0, 0.05, 0.3)))
            else:
                frame = _request(rng, opaque)
            frames.append(_damage(rng, frame) if rng.random() < 0.02 else frame)
        stream = b"".join(frames)
        reads, pos = [], 0
        while pos < len(stream):
            pos = min(len(stream), pos + rng.choice((1, 9, rng.randrange(1, 400), len(stream), len(stream))))
            reads.append(pos)
        max_inflight = rng.choice((1, 4, 17, 1 << 16))
        # (a bound some frames pass, one some reads pass: then the reader is not used, the split refuses the frame)
        frame_max = rng.choice((_FRAME_MAX, _FRAME_MAX, 262, 1200))
        for _ in range(2):  # the layouts the stream teaches, learned before comparing
            _trial(_Sends(), trial, stream, reads, max_inflight, frame_max)
        # (both from the same learned layouts: frames the reader takes match a layout, so neither side learns from
        # them, and both learn the same from the others)
        learned = dict(cmdmod._LAYOUTS), set(cmdmod._LAYOUT_MISSES)
        expected = _trial(_Sends(), trial, stream, reads, max_inflight, frame_max)
        cmdmod._LAYOUTS.clear()
        cmdmod._LAYOUTS.update(learned[0])
        cmdmod._LAYOUT_MISSES.clear()
        cmdmod._LAYOUT_MISSES.update(learned[1])
        got = _trial(_ReadingSends(), trial, stream, reads, max_inflight, frame_max)
        assert got == expected, trial
        read_by_reader += sum(
            1
            for kind, fields, *_ in got[0]
            for one in (fields if kind == "many" else [fields])
            if one[0][0] == 310 and type(one[2]) is cmdmod._ExtLayout  # (the code; the layout)
        )
    assert read_by_reader > 2000, read_by_reader


async def test_lone_sends_read_one_frame_a_read_hand_over_what_the_split_hands_over(monkeypatch) -> None:
    """A read of exactly one frame that the connection's reader takes goes from ``data_received`` straight to
    ``dispatch`` (no ``_process``): over random streams read mostly one frame at a time (sometimes two, half a
    frame, a frame and a half, or a damaged frame, so that a lone frame also follows a partial one, a response, a
    paused read or a refused frame), the same requests are handed over, alone or in runs, and the same bytes
    written, as by the connection that asks every request (no reader). Fails if that path took a frame behind a
    partial one, a frame while reading is paused, or a frame its reader refuses."""
    cmdmod._LAYOUTS.clear()
    cmdmod._LAYOUT_MISSES.clear()
    _learn()
    rng = random.Random(15131)
    straight = 0
    processed = RemotingProtocol._process

    def counting(self, *args):  # noqa: ANN001, ANN002
        counting.calls += 1
        return processed(self, *args)

    counting.calls = 0
    monkeypatch.setattr(RemotingProtocol, "_process", counting)
    for trial in range(300):
        frames = []
        for n in range(rng.randrange(1, 40)):
            opaque = trial * 1000 + n
            if rng.random() < 0.9:
                frame, _ = _send(rng, opaque, rng.choice((0.0, 0.0, 0.05, 0.3)))
            else:
                frame = _request(rng, opaque)
            frames.append(_damage(rng, frame) if rng.random() < 0.02 else frame)
        stream = b"".join(frames)
        ends = [sum(map(len, frames[: i + 1])) for i in range(len(frames))]
        reads, k = [], 0
        while k < len(ends):
            roll = rng.random()
            if roll < 0.7:  # one frame
                k += 1
                reads.append(ends[k - 1])
            elif roll < 0.8 and k + 2 <= len(ends):  # two frames
                k += 2
                reads.append(ends[k - 1])
            else:  # up to the middle of the next frame, then the rest with the following frame, if any
                start = ends[k - 1] if k else 0
                reads.append(start + max(1, (ends[k] - start) // 2))
                k += 1
                if k < len(ends) and rng.random() < 0.5:
                    k += 1
                reads.append(ends[k - 1])
        max_inflight = rng.choice((1, 2, 4, 1 << 16))
        frame_max = rng.choice((_FRAME_MAX, _FRAME_MAX, 262))
        held = frozenset(i for i in range(len(reads)) if rng.random() < 0.3)
        for _ in range(2):
            _trial(_Sends(), trial, stream, reads, max_inflight, frame_max, held)
        learned = dict(cmdmod._LAYOUTS), set(cmdmod._LAYOUT_MISSES)
        expected = _trial(_Sends(), trial, stream, reads, max_inflight, frame_max, held)
        cmdmod._LAYOUTS.clear()
        cmdmod._LAYOUTS.update(learned[0])
        cmdmod._LAYOUT_MISSES.clear()
        cmdmod._LAYOUT_MISSES.update(learned[1])
        before = counting.calls
        got = _trial(_ReadingSends(), trial, stream, reads, max_inflight, frame_max, held)
        assert got == expected, trial
        # (each read went to _process but for those the straight path took; _deferred_process calls it too)
        straight += max(0, len(reads) - (counting.calls - before))
    assert straight > 800, straight


def test_the_reader_s_header_is_a_send_header_values_equal_to_the_processor_s() -> None:
    cmdmod._LAYOUTS.clear()
    cmdmod._LAYOUT_MISSES.clear()
    cmd = _learn()
    frame, taken = _send(random.Random(0), 9, 0.0)
    assert taken == ("JAVA", 409)
    run: list[RemotingCommand] = []
    assert reader(cmd)(frame * 2, 0, 2 * len(frame), 64, run) == 2 * len(frame)  # type: ignore[misc]
    header = run[1].custom_header
    assert type(header) is SendHeaderValues
    assert (header.topic, header.queue_id, header.born_timestamp, header.unit_mode, header.batch) == (
        "BenchmarkTest",
        3,
        1764021600123,
        False,
        False,
    )
    assert struct.unpack_from(">i", frame, 13)[0] == run[1].opaque == 9


def test_a_batch_is_left_to_the_general_path_whatever_its_layout() -> None:
    """A layout learned from V2 sends flagged batch (``m`` "true", or "1": ``_is_batch``'s C++ flag): its reader
    takes none of them (``groupable`` refuses a batch); the same layout's single sends (m "TRUE"... are no batch
    texts it reads: left too) stay with the general path."""
    for flag in ("true", "1"):
        cmdmod._LAYOUTS.clear()
        cmdmod._LAYOUT_MISSES.clear()
        ext = dict(JAVA_SEND_V2, m=flag)
        frame = RemotingCommand(310, 5, 0, None, ext, b"x", "JAVA", 409, 1).to_bytes()
        for _ in range(3):
            cmd = RemotingCommand.decode_at(frame, 4, len(frame))
        assert cmd.ext_layout is not None and not _groupable(cmd)
        read = reader(cmd)
        assert read is not None
        run: list[RemotingCommand] = []
        assert read(frame * 3, 0, 3 * len(frame), 64, run) == 0 and run == []
