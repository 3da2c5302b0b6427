"""``RemotingProtocol._process`` splits frames itself (``FrameDecoder.next_frame`` unrolled) and cuts each with
``RemotingCommand.decode_at``: over random streams (good sends of both header types, bad lengths, bad headers,
responses, oneways) cut into random reads, the connection hands over exactly what ``FrameDecoder.feed`` and
``RemotingCommand.decode`` give frame by frame: the same requests, the same error answers, the same close.
"""

from __future__ import annotations

import asyncio
import random
import struct

from bench.null_transport import NullTransport
from remoting import command as cmdmod
from remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand, equality_fields
from remoting.errors import FrameError, RemotingCommandError
from remoting.frame import FrameDecoder
from remoting.protocol import RemotingProtocol

_FRAME_MAX = 4096


class _Recorder:
    """A dispatcher that keeps what it is handed (no grouping: each request alone)."""

    def __init__(self) -> None:
        self.requests: list[tuple] = []
        self.errors = 0

    def channel_connected(self, channel) -> None:  # noqa: ANN001
        pass

    def dispatch(self, channel, request: RemotingCommand) -> None:  # noqa: ANN001
        self.requests.append(_fields(request))

    def channel_error(self, channel, exc) -> None:  # noqa: ANN001
        self.errors += 1

    def channel_closed(self, channel, exc) -> None:  # noqa: ANN001
        pass


def _fields(cmd: RemotingCommand) -> tuple:
    body = cmd.body
    assert body is None or type(body) is bytes  # a copy, never a view of the connection's buffer
    return (equality_fields(cmd), cmd.ext_values)


def _request(rng: random.Random, n: int) -> bytes:
    ext = {"a": "group", "b": "Topic", "e": str(n % 4), "g": str(1764021600000 + n), "i": f"KEY\x01{n:08X}\x02"}
    if rng.random() < 0.1:
        ext["z"] = "ü"  # not ASCII
    flag = rng.choice((0, 0, 0, FLAG_ONEWAY, FLAG_RESPONSE))
    cmd = RemotingCommand(310, n, flag, "r" if rng.random() < 0.05 else None, ext, b"x" * rng.randrange(0, 40))
    cmd.serialize_type = 1 if rng.random() < 0.8 else 0
    return cmd.to_bytes()


def _damage(rng: random.Random, frame: bytes) -> bytes:
    frame = bytearray(frame)
    roll = rng.random()
    if roll < 0.4:  # a byte of the header (its length word, type, a field)
        frame[rng.randrange(4, min(len(frame), 40))] = rng.randrange(256)
    elif roll < 0.6:  # the header length word alone
        frame[4:8] = struct.pack(">I", rng.randrange(1 << 32))
    elif roll < 0.8:  # the frame's length: too long, zero, negative
        frame[0:4] = struct.pack(">i", rng.choice((_FRAME_MAX + 1, 0, -5)))
    else:  # a frame too short for its header length word
        frame = bytearray(struct.pack(">i", 2) + b"ab")
    return bytes(frame)


def _expected(stream: bytes) -> tuple:
    """What the frame-by-frame path gives: the requests handed over, the error answers (their opaques) and
    whether the connection was given up."""
    requests, answers = [], []
    decoder = FrameDecoder(_FRAME_MAX)
    try:
        for frame in decoder.feed(stream):
            try:
                cmd = RemotingCommand.decode(frame)
            except RemotingCommandError as exc:
                if exc.opaque is None or exc.flag & FLAG_RESPONSE:
                    return requests, answers, True
                if not exc.flag & FLAG_ONEWAY:
                    answers.append(exc.opaque)
                continue
            if not cmd.flag & FLAG_RESPONSE:
                requests.append(_fields(cmd))
    except FrameError:
        return requests, answers, True
    return requests, answers, False


def _written_opaques(transport: NullTransport) -> list[int]:
    opaques = []
    decoder = FrameDecoder()
    for chunk in transport.chunks:
        opaques += [RemotingCommand.decode(frame).opaque for frame in decoder.feed(chunk)]
    return opaques


async def test_the_connection_splits_and_decodes_as_the_frame_by_frame_path() -> None:
    rng = random.Random(1510)
    for trial in range(300):
        frames = []
        for n in range(rng.randrange(1, 12)):
            frame = _request(rng, trial * 100 + n)
            frames.append(_damage(rng, frame) if rng.random() < 0.15 else frame)
        stream = b"".join(frames)
        # the layouts the first pass learns must be those the second sees: learn from the stream first
        for _ in range(2):
            _expected(stream)
        recorder, transport = _Recorder(), NullTransport(keep=True)
        protocol = RemotingProtocol(recorder, trial, frame_max=_FRAME_MAX)
        protocol.connection_made(transport)
        pos = 0
        while pos < len(stream) and not transport.closed:  # random reads: whole frames, halves, single bytes
            cut = pos + rng.choice((1, 3, rng.randrange(1, 200), len(stream)))
            chunk = stream[pos:cut]
            protocol.data_received(chunk if rng.random() < 0.7 else bytearray(chunk))
            pos = cut
        assert protocol.channel is not None
        protocol.channel.flush()
        requests, answers, failed = _expected(stream)
        assert recorder.requests == requests, trial
        assert _written_opaques(transport) == answers, trial
        assert transport.closed == failed and recorder.errors == int(failed), trial
        protocol.connection_lost(None)
    assert cmdmod._LAYOUTS  # (the layout path was taken too)


async def test_decode_at_gives_what_decode_gives_at_any_offset() -> None:
    rng = random.Random(77)
    for n in range(2000):
        frame = _request(rng, n)[4:]
        if rng.random() < 0.3:
            frame = _damage(rng, b"\0\0\0\0" + frame)[4:]
        pad = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 9)))
        buf = pad + frame + pad
        cut = rng.choice((len(frame), rng.randrange(0, len(frame) + 1)))  # whole, or any prefix of it
        for source in (buf, bytearray(buf)):
            for _ in range(2):  # whatever it teaches (a layout) is learned before comparing
                _outcome(RemotingCommand.decode_at, source, len(pad), len(pad) + cut)
            got = _outcome(RemotingCommand.decode_at, source, len(pad), len(pad) + cut)
            assert got == _outcome(
                lambda b, s, e: RemotingCommand.decode(memoryview(b)[s:e]), buf, len(pad), len(pad) + cut
            )
    await asyncio.sleep(0)


def _outcome(fn, *args) -> tuple:  # noqa: ANN001
    try:
        return _fields(fn(*args))
    except RemotingCommandError as exc:
        return ("error", str(exc), exc.opaque, exc.flag, exc.serialize_type)
