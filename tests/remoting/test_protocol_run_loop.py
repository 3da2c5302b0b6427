"""``RemotingProtocol._process`` collects a run of grouped requests straight from the read (the run's loop: the
read, the flow state and the code's check held while nothing is dispatched); pinned against the loop as it was
before (``_Reference._process``, the one-frame-at-a-time split, kept here verbatim): random streams of grouped and
ungrouped codes, checks that refuse or flip mid-stream, responses, oneways, damaged headers, bad frame lengths and
frames cut anywhere by random reads (bytes and bytearrays), under in-flight bounds that cut the runs: the same
runs and lone requests handed over, the same error answers written, the same close.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from test_protocol_grouping import _frame, _Grouping
from test_protocol_split import _damage, _request, _written_opaques

from bench.null_transport import NullTransport
from remoting.codes import ResponseCode
from remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from remoting.errors import FrameError, RemotingCommandError
from remoting.frame import unpack_length as _unpack_length
from remoting.protocol import _RUN_MAX, RemotingProtocol, log

_FRAME_MAX = 1 << 16


class _Reference(RemotingProtocol):
    def _process(self) -> None:  # noqa: C901 - the reference, as it was
        decoder = self._decoder
        flow = self._flow
        channel = self.channel
        dispatcher = self._dispatcher
        grouping = self._grouping
        # the dispatcher's check for the last code seen (``grouping`` asked once per run of one code, not once
        # a request; nothing registers routes while this loop runs); None: that code never groups
        last_code: int | None = None
        groupable: Callable[[RemotingCommand], bool] | None = None
        assert flow is not None and channel is not None
        run: list[RemotingCommand] = []
        # a run never takes the connection past its in-flight bound (reading pauses between runs): its room is
        # worked out when it starts (the count only moves when something is dispatched, never while a run is
        # collected), so a read of lone requests never asks
        room = 0
        decode_at = RemotingCommand.decode_at
        frame_max = decoder.max_frame
        while not flow.read_paused:
            # FrameDecoder.next_frame, unrolled (once per request): the next complete frame's bounds in the
            # decoder's buffer, which decode_at cuts without a view of it; a bad length goes to next_frame for its
            # error. The decoder's state is its own again after each frame (nothing cached across a dispatch).
            buf = decoder.buf
            pos = decoder.pos
            size = len(buf)
            if size - pos < 4:  # the end of the read (the usual one): its run handed over
                if run:
                    if len(run) == 1:  # (_dispatch_run, inlined: a lone request a read is the common case)
                        dispatcher.dispatch(channel, run[0])
                    else:
                        self._dispatch_many(channel, run)  # type: ignore[misc]
                return
            (length,) = _unpack_length(buf, pos)
            if length <= 0 or length > frame_max:
                try:
                    decoder.next_frame()  # (raises for this length)
                except FrameError as exc:
                    if run:
                        self._dispatch_run(run)
                    self._fail(exc, "bad frame")
                    return
                raise AssertionError("next_frame took a length this split refused")  # pragma: no cover
            start = pos + 4
            end = start + length
            if end > size:
                if run:
                    self._dispatch_run(run)
                return
            if end == size:
                decoder.release()  # (see next_frame: an idle connection must not keep its last read)
            else:
                decoder.pos = end
            try:
                cmd = decode_at(buf, start, end)
            except RemotingCommandError as exc:
                if run:
                    self._dispatch_run(run)
                    run = []
                if exc.opaque is None or exc.flag & FLAG_RESPONSE:
                    self._fail(exc, "undecodable command")
                    return
                log.warning("bad request header", remote=channel.remote_addr, opaque=exc.opaque, error=str(exc))
                if not exc.flag & FLAG_ONEWAY:
                    answer = RemotingCommand(
                        code=ResponseCode.SYSTEM_ERROR,
                        opaque=exc.opaque,
                        flag=FLAG_RESPONSE,
                        remark=str(exc),
                        serialize_type=exc.serialize_type,
                    )
                    channel.send(answer)
                continue
            if cmd.flag & FLAG_RESPONSE:
                if run:
                    self._dispatch_run(run)
                    run = []
                channel.response_received(cmd)
                continue
            code = cmd.code
            if code != last_code:
                last_code = code
                groupable = None if grouping is None else grouping(code)
            if groupable is None or not groupable(cmd):
                if run:
                    self._dispatch_run(run)
                    run = []
                dispatcher.dispatch(channel, cmd)
            else:
                if not run:
                    room = min(_RUN_MAX, self._max_inflight - self._inflight)
                run.append(cmd)
                if len(run) >= room:
                    self._dispatch_run(run)
                    run = []
        if run:
            self._dispatch_run(run)


def _trial(
    rng: random.Random,
    trial: int,
    protocol_class: type[RemotingProtocol],
    stream: bytes,
    reads: list[int],
    max_inflight: int,
) -> tuple:
    dispatcher, transport = _Grouping(), NullTransport(keep=True)
    protocol = protocol_class(dispatcher, trial, frame_max=_FRAME_MAX, max_inflight=max_inflight)
    dispatcher.protocol = protocol
    protocol.connection_made(transport)
    pos = 0
    for i, cut in enumerate(reads):
        chunk = stream[pos:cut]
        protocol.data_received(chunk if i % 3 else bytearray(chunk))
        pos = cut
        while protocol.inflight and not transport.closed:  # the requests in flight finish: reading resumes
            protocol.requests_finished(protocol.inflight)
            protocol._deferred_process()
    assert protocol.channel is not None
    protocol.channel.flush()
    return dispatcher.handed, dispatcher.asked, _written_opaques(transport), transport.closed


async def test_the_run_loop_hands_over_what_the_frame_by_frame_loop_did() -> None:
    rng = random.Random(1512)
    for trial in range(400):
        frames = []
        for n in range(rng.randrange(1, 70)):
            frame = _frame(rng, trial * 1000 + n) if rng.random() < 0.7 else _request(rng, trial * 1000 + n)
            frames.append(_damage(rng, frame) if rng.random() < 0.04 else frame)
        stream = b"".join(frames)
        reads, pos = [], 0
        while pos < len(stream):
            pos = min(len(stream), pos + rng.choice((1, 7, rng.randrange(1, 300), len(stream))))
            reads.append(pos)
        max_inflight = rng.choice((1, 3, 17, 1 << 16))
        for _ in range(2):  # the layouts the stream teaches, learned before comparing
            _trial(rng, trial, _Reference, stream, reads, max_inflight)
        expected = _trial(rng, trial, _Reference, stream, reads, max_inflight)
        assert _trial(rng, trial, RemotingProtocol, stream, reads, max_inflight) == expected, trial
    await asyncio.sleep(0)
