"""``RemotingProtocol``: one asyncio ``Protocol`` per connection — decode frames, dispatch, write, back-pressure.

Incoming bytes → ``FrameDecoder`` → ``RemotingCommand``; responses (flag bit0) complete our own
pending invokes on the ``Channel``, requests go to the dispatcher (the server's dispatch table or
the client's handler table). A broken stream (bad length, undecodable header without an opaque)
costs one log line and the connection; a request whose header is readable enough to carry an
opaque is answered with SYSTEM_ERROR instead.

Reading pauses while the peer does not drain our writes or has too many requests in flight
(``FlowControl``); frames already received stay in the decoder until reading resumes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

import structlog

from remoting.channel import Channel
from remoting.codes import ResponseCode
from remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from remoting.errors import FrameError, RemotingCommandError
from remoting.flow_control import FlowControl
from remoting.frame import DEFAULT_FRAME_MAX, FrameDecoder
from remoting.frame import unpack_length as _unpack_length
from remoting.send_run import reader as _send_reader

log = structlog.get_logger(__name__)

DEFAULT_WRITE_HIGH_WATER = 4 * 1024 * 1024
DEFAULT_WRITE_LOW_WATER = 1024 * 1024
DEFAULT_MAX_INFLIGHT = 1024
#: requests decoded from one read handed to the dispatcher in one call at most
_RUN_MAX = 64


class Dispatcher(Protocol):
    """What a connection needs from its owner (server or client)."""

    def channel_connected(self, channel: Channel) -> None: ...
    def dispatch(self, channel: Channel, request: RemotingCommand) -> None: ...
    # optional, together: def grouping(self, code: int) -> Callable[[RemotingCommand], bool] | None
    #                     def dispatch_many(self, channel: Channel, requests: list[RemotingCommand]) -> None
    # optional, with them:  def reads_sends(self, code: int) -> bool   (see remoting.send_run)
    def channel_error(self, channel: Channel, exc: BaseException) -> None: ...
    def channel_closed(self, channel: Channel, exc: BaseException | None) -> None: ...


class RemotingProtocol(asyncio.Protocol):
    def __init__(
        self,
        dispatcher: Dispatcher,
        channel_id: int,
        *,
        frame_max: int = DEFAULT_FRAME_MAX,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        write_high_water: int = DEFAULT_WRITE_HIGH_WATER,
        write_low_water: int = DEFAULT_WRITE_LOW_WATER,
    ) -> None:
        self._dispatcher = dispatcher
        self._channel_id = channel_id
        self._decoder = FrameDecoder(frame_max)
        self._max_inflight = max_inflight
        self._resume_inflight = max(0, max_inflight // 2)
        self._high = write_high_water
        self._low = write_low_water
        self._inflight = 0
        self._transport: asyncio.Transport | None = None
        self._flow: FlowControl | None = None
        self._process_scheduled = False
        self._broken = False
        self.channel: Channel | None = None
        #: the dispatcher's optional grouping(code) and dispatch_many(channel, requests) (the server's): consecutive
        #: requests its per-code check takes (the sends) go to it in one call; every other request one by one
        self._grouping = getattr(dispatcher, "grouping", None)
        self._dispatch_many = getattr(dispatcher, "dispatch_many", None)
        #: the dispatcher's optional reads_sends(code): True when grouping(code)'s check takes every single
        #: SEND_MESSAGE_V2 request that ``remoting.send_run`` reads the same way as the run's first (see there)
        self._reads_sends = getattr(dispatcher, "reads_sends", None)
        #: the run reader of this connection's last run of sends (None: none yet), tried on a read's first frame
        self._first_reader: Callable[..., int] | None = None

    # ---- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport; they implement its interface.
        self._transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(high=self._high, low=self._low)  # type: ignore[attr-defined]
        self._flow = FlowControl(transport)  # type: ignore[arg-type]
        self.channel = Channel(transport, self, self._channel_id)  # type: ignore[arg-type]
        self._dispatcher.channel_connected(self.channel)

    def data_received(self, data: bytes) -> None:
        if self._broken:
            return
        decoder = self._decoder
        reader = self._first_reader
        # A lone send (a read of exactly one frame, nothing buffered before it, reading not paused, the frame one the
        # connection's send reader takes: the common read under the benchmark Producer and in consume-while-
        # producing) goes straight to the dispatcher: what ``_process`` would do with it (its check only decides
        # grouping, and a request alone in its read is dispatched alone either way), without its set-up and loop.
        if (
            reader is not None
            and (size := len(data)) > 4
            and _unpack_length(data)[0] == size - 4  # (a read of several frames stops here)
            and data.__class__ is bytes
            and size <= decoder.max_frame
            and decoder.pos >= len(decoder.buf)
            and not self._flow.read_paused  # type: ignore[union-attr]
        ):
            run: list[RemotingCommand] = []
            if reader(data, 0, size, 1, run) == size:
                self._dispatcher.dispatch(self.channel, run[0])  # type: ignore[arg-type]
                return
            decoder.append(data)
            self._process(False)  # (the reader refused that frame: not offered it again)
            return
        decoder.append(data)
        self._process()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    def pause_writing(self) -> None:
        assert self._flow is not None
        self._flow.pause_writing()

    def resume_writing(self) -> None:
        assert self._flow is not None
        self._flow.resume_writing()
        self._schedule_process()

    def connection_lost(self, exc: Exception | None) -> None:
        self._decoder.clear()  # a partial frame (up to frameMaxLength) would otherwise live until a GC
        channel = self.channel
        if channel is None:
            return
        channel.connection_lost(exc)
        if exc is not None:
            self._dispatcher.channel_error(channel, exc)
        self._dispatcher.channel_closed(channel, exc)

    # ---- in-flight accounting (RequestTask) --------------------------------------------------
    def request_started(self) -> None:
        self._inflight += 1
        if self._inflight >= self._max_inflight:
            assert self._flow is not None
            self._flow.set_busy(True)

    def request_finished(self) -> None:
        self._inflight -= 1
        flow = self._flow
        if flow is not None and flow.busy and self._inflight <= self._resume_inflight:
            flow.set_busy(False)
            self._schedule_process()

    def requests_started(self, count: int) -> None:
        """``request_started`` for ``count`` requests at once (a request group's)."""
        self._inflight += count
        if self._inflight >= self._max_inflight:
            assert self._flow is not None
            self._flow.set_busy(True)

    def requests_finished(self, count: int) -> None:
        """``request_finished`` for ``count`` requests at once: the same end state as ``count`` calls (reading
        resumes once, when the count falls to the resume mark)."""
        self._inflight -= count
        flow = self._flow
        if flow is not None and flow.busy and self._inflight <= self._resume_inflight:
            flow.set_busy(False)
            self._schedule_process()

    @property
    def inflight(self) -> int:
        return self._inflight

    @property
    def read_paused(self) -> bool:
        return self._flow is not None and self._flow.read_paused

    # ---- frames ------------------------------------------------------------------------------
    def _schedule_process(self) -> None:
        # Frames held back while paused are processed from a fresh callback, never re-entrantly
        # from inside a worker's send().
        if not self._process_scheduled and self._decoder.buffered and self._transport is not None:
            self._process_scheduled = True
            asyncio.get_running_loop().call_soon(self._deferred_process)

    def _deferred_process(self) -> None:
        self._process_scheduled = False
        if not self._broken and self._transport is not None and not self._transport.is_closing():
            self._process()

    def _process(self, offer_first: bool = True) -> None:
        """Decode every complete frame: responses complete our invokes, requests go to the dispatcher. Requests
        the dispatcher groups (``grouping(code)``'s check takes them: the server's sends) are collected into a run handed over in
        one call (``dispatch_many``) before anything else happens: before another request, a response, an
        error answer, the end of the buffered bytes, ``_RUN_MAX`` requests or the in-flight bound. Reading
        pauses between requests and runs as before."""
        decoder = self._decoder
        flow = self._flow
        channel = self.channel
        dispatcher = self._dispatcher
        grouping = self._grouping
        # the dispatcher's check for the last code seen (``grouping`` asked once per run of one code, not once
        # a request; nothing registers routes while this loop runs); None: that code never groups
        last_code: int | None = None
        groupable: Callable[[RemotingCommand], bool] | None = None
        # whether that check takes every single SEND_MESSAGE_V2 alike while nothing is dispatched (the dispatcher's
        # ``reads_sends(code)``): then a run's following sends may be read by their layout's run reader
        reads_sends = self._reads_sends
        sends: bool | None = None
        first_reader = self._first_reader if offer_first else None
        by_first: RemotingCommand | None = None  # the last request that reader read as a read's first frame
        assert flow is not None and channel is not None
        run: list[RemotingCommand] = []
        # a run never takes the connection past its in-flight bound (reading pauses between runs): its room is
        # worked out when it starts (the count only moves when something is dispatched, never while a run is
        # collected), so a read of lone requests never asks
        room = 0
        decode_at = RemotingCommand.decode_at
        frame_max = decoder.max_frame
        # a response or a request of another code that the run's loop (below) decoded: handled next, in its place
        taken: RemotingCommand | None = None
        while not flow.read_paused:
            if taken is None:
                # FrameDecoder.next_frame, unrolled (once per request): the next complete frame's bounds in the
                # decoder's buffer, which decode_at cuts without a view of it; a bad length goes to next_frame for
                # its error. The decoder's state is its own again after each frame (nothing cached across a
                # dispatch).
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
                # a producer's connection: the read's first frame read by the last run's reader when it takes it
                # (the common send: no decode_at, no header decode; the dispatcher's check is asked of it below)
                cmd = None
                if first_reader is not None and not run and buf.__class__ is bytes and size <= frame_max:
                    end = first_reader(buf, pos, size, 1, run)
                    if end == size:
                        # a send alone at the end of the read (under the benchmark Producer most reads carry one or
                        # two, in consume-while-producing most one): nothing follows it, so it is dispatched alone
                        # whatever the dispatcher's check would say (that check only decides grouping; its header
                        # is on it already), and the read is done
                        decoder.release()
                        dispatcher.dispatch(channel, run.pop())
                        return
                    if end != pos:
                        cmd = by_first = run.pop()
                        decoder.pos = end
                if cmd is None:
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
            else:
                cmd, taken = taken, None
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
                sends = None  # (asked when a run of this code first wants a reader)
            if groupable is None or not groupable(cmd):
                if run:
                    self._dispatch_run(run)
                    run = []
                dispatcher.dispatch(channel, cmd)
                continue
            if not run:
                room = min(_RUN_MAX, self._max_inflight - self._inflight)
            run.append(cmd)
            # a run of sends: the following frames of this request's layout read in one call (``remoting.send_run``)
            # while the dispatcher's check takes every single send alike; the first frame that reader does not take
            # is read below, in its place. Not asked for a send the last run's reader read when no frame follows it
            # in this read (a lone send: nothing to read; that reader stays the connection's).
            reader = None
            # (a read no longer than the frame bound: no frame in it can be past that bound, which the reader does
            # not check)
            if (
                cmd.ext_layout is not None
                and buf.__class__ is bytes
                and size <= frame_max
                and (cmd is not by_first or size - end >= 4)
            ):
                if sends is None:
                    sends = reads_sends is not None and reads_sends(code)
                if sends:
                    reader = first_reader if cmd is by_first else _send_reader(cmd)
                    if reader is not None:
                        first_reader = self._first_reader = reader
            # The run's next frames, straight from this read: while a run is collected nothing is dispatched, so
            # the read, the flow state, the in-flight count and this code's check stay as they are, and only the
            # decoder's index moves (after a frame decoded: a frame that fails to decode, or that is not whole,
            # is left to the split above, which decodes it again for its error). A response or another code is
            # handled next, in its place, as ``taken``; a request the check refuses ends the run here.
            while len(run) < room:
                if reader is not None:
                    following = reader(buf, end, size, room, run)
                    if following != end:
                        end = following
                        if end == size:
                            decoder.release()
                        else:
                            decoder.pos = end
                        if len(run) >= room:
                            continue
                if size - end < 4:
                    break
                (length,) = _unpack_length(buf, end)
                start = end + 4
                following = start + length
                if length <= 0 or length > frame_max or following > size:
                    break
                try:
                    cmd = decode_at(buf, start, following)
                except RemotingCommandError:
                    break
                end = following
                if end == size:
                    decoder.release()
                else:
                    decoder.pos = end
                if cmd.flag & FLAG_RESPONSE or cmd.code != last_code:
                    taken = cmd
                    break
                if not groupable(cmd):  # (asked once a request: refused, it is dispatched alone here, in its place)
                    self._dispatch_run(run)
                    run = []
                    dispatcher.dispatch(channel, cmd)
                    break
                run.append(cmd)
            else:
                self._dispatch_run(run)
                run = []
        if run:
            self._dispatch_run(run)

    def _dispatch_run(self, run: list[RemotingCommand]) -> None:
        channel = self.channel
        assert channel is not None
        if len(run) == 1:
            self._dispatcher.dispatch(channel, run[0])
        else:
            self._dispatch_many(channel, run)  # type: ignore[misc]

    def _fail(self, exc: Exception, what: str) -> None:
        self._broken = True
        channel = self.channel
        assert channel is not None and self._transport is not None
        log.warning("closing the connection", reason=what, remote=channel.remote_addr, error=str(exc))
        self._dispatcher.channel_error(channel, exc)
        channel.close()  # flushes answers to the frames before the bad one
