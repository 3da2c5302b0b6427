"""``RemotingProtocol._process`` asks the dispatcher's ``grouping(code)`` once per run of one request code and then
that code's check per request: over random streams (grouped and ungrouped codes, requests the check refuses, a
check whose answer changes mid-stream as fault injection switched on would, responses, oneways, bad headers), the
runs and lone requests handed over are those of the general path, which asks whether each request groups.
"""

from __future__ import annotations

import asyncio
import random

from bench.null_transport import NullTransport
from remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from remoting.errors import RemotingCommandError
from remoting.executor import RequestExecutor
from remoting.frame import FrameDecoder
from remoting.protocol import _RUN_MAX, RemotingProtocol
from remoting.server import RemotingServer

_GROUPED = (310, 10)  # codes whose check may take a request
_OTHER = (11, 34)  # codes that never group


class _Grouping:
    """A dispatcher with a per-code check; an ``off`` request dispatched alone flips the check's answer for the
    requests after it (the send processor reads its fault-injection switch per request)."""

    def __init__(self) -> None:
        self.handed: list[tuple] = []
        self.asked: list[int] = []
        self.off = False
        #: set: each request handed over counts in flight on it, as the server's dispatch counts it
        self.protocol: RemotingProtocol | None = None

    def check(self, request: RemotingCommand) -> bool:
        return not self.off and request.ext_fields.get("batch") != "true"

    def grouping(self, code: int):  # noqa: ANN201
        self.asked.append(code)
        return self.check if code in _GROUPED else None

    def groups(self, request: RemotingCommand) -> bool:  # the general path: asked of every request
        return request.code in _GROUPED and self.check(request)

    def dispatch(self, channel, request: RemotingCommand) -> None:  # noqa: ANN001
        self.handed.append(("one", request.opaque))
        if self.protocol is not None:
            self.protocol.request_started()
        if request.ext_fields.get("toggle"):
            self.off = not self.off

    def dispatch_many(self, channel, requests: list[RemotingCommand]) -> None:  # noqa: ANN001
        self.handed.append(("many", [r.opaque for r in requests]))
        if self.protocol is not None:
            self.protocol.requests_started(len(requests))

    def channel_connected(self, channel) -> None:  # noqa: ANN001
        pass

    def channel_error(self, channel, exc) -> None:  # noqa: ANN001
        pass

    def channel_closed(self, channel, exc) -> None:  # noqa: ANN001
        pass


def _frame(rng: random.Random, n: int) -> bytes:
    code = rng.choice(_GROUPED * 3 + _OTHER)
    ext = {"a": "group", "b": "Topic", "n": str(n)}
    if rng.random() < 0.15:
        ext["batch"] = "true"
    if code in _OTHER and rng.random() < 0.3:
        ext["toggle"] = "1"
    flag = rng.choice((0, 0, 0, 0, FLAG_ONEWAY, FLAG_RESPONSE))
    cmd = RemotingCommand(code, n, flag, None, ext, b"x")
    cmd.serialize_type = rng.choice((0, 1))
    frame = cmd.to_bytes()
    if rng.random() < 0.05:  # a header that does not decode: an error answer (or a close) in its place
        frame = frame[:8] + b"\xff" + frame[9:]
    return frame


def _general(stream: bytes, dispatcher: _Grouping, max_inflight: int | None = None) -> list[tuple]:
    """The general path frame by frame: ``groups(request)`` asked of every request, runs cut as ``_process`` cuts
    them (by a response, an error answer, a request that does not group, ``_RUN_MAX``, the end of the read) and,
    with ``max_inflight``, by the in-flight bound (a run's room: the bound less the requests in flight; reading
    pauses at the bound, and the test then finishes every request in flight)."""
    run: list[RemotingCommand] = []
    inflight = 0

    def flush() -> None:
        nonlocal inflight
        if len(run) == 1:
            dispatcher.dispatch(None, run[0])
        elif run:
            dispatcher.dispatch_many(None, list(run))
        inflight += len(run)
        run.clear()

    for frame in FrameDecoder(1 << 20).feed(stream):
        if max_inflight is not None and inflight >= max_inflight:
            flush()  # (the loop ends here while paused; the run it held goes first)
            inflight = 0
        try:
            cmd = RemotingCommand.decode(frame)
        except RemotingCommandError as exc:
            flush()
            if exc.opaque is None or exc.flag & FLAG_RESPONSE:
                return dispatcher.handed
            continue
        if cmd.flag & FLAG_RESPONSE:
            flush()
            continue
        if not dispatcher.asked or dispatcher.asked[-1] != cmd.code:
            dispatcher.asked.append(cmd.code)  # (the codes' runs: what the connection asks ``grouping`` about)
        if not dispatcher.groups(cmd):
            flush()
            dispatcher.dispatch(None, cmd)
            inflight += 1
        else:
            run.append(cmd)
            room = _RUN_MAX if max_inflight is None else min(_RUN_MAX, max_inflight - inflight)
            if len(run) >= room:
                flush()
    flush()
    return dispatcher.handed


async def test_grouping_asked_once_per_run_of_a_code_hands_over_what_asking_each_request_does() -> None:
    rng = random.Random(1511)
    for trial in range(250):
        stream = b"".join(_frame(rng, trial * 1000 + n) for n in range(rng.randrange(1, 90)))
        oracle = _Grouping()
        expected = _general(stream, oracle)
        dispatcher, transport = _Grouping(), NullTransport(keep=True)
        protocol = RemotingProtocol(dispatcher, trial, frame_max=1 << 20, max_inflight=1 << 16)
        protocol.connection_made(transport)
        protocol.data_received(stream)  # one read: the runs are cut by the requests alone
        assert dispatcher.handed == expected, trial
        # asked once per run of one code among the requests, never once a request
        assert dispatcher.asked == oracle.asked, trial
        protocol.connection_lost(None)


def test_the_server_hands_out_the_processor_check_per_code() -> None:
    class Sends:
        def groupable(self, request: RemotingCommand) -> bool:
            return request.ext_fields.get("batch") is None

        async def process_requests(self, channel, requests):  # noqa: ANN001, ANN201
            return []

        async def process_request(self, channel, request):  # noqa: ANN001, ANN201
            return None

    class Alone:
        async def process_request(self, channel, request):  # noqa: ANN001, ANN201
            return None

    server = RemotingServer()
    sends = Sends()
    executor = RequestExecutor("send", 1, 10)
    server.register_processor(310, sends, executor)
    server.register_processor(11, Alone(), executor)
    assert server.grouping(310) == sends.groupable
    assert server.grouping(11) is None and server.grouping(99) is None
    single, batch = RemotingCommand(310, 1, 0, None, {}), RemotingCommand(310, 2, 0, None, {"batch": "true"})
    assert server.groups(single) and not server.groups(batch) and not server.groups(RemotingCommand(11, 3))


async def test_runs_stop_at_the_in_flight_bound_as_on_the_general_path() -> None:
    """Requests counted in flight as they are handed over, a small bound: the runs are cut at the room left under
    it, reading pauses at it and goes on (here) once the test finishes what is in flight."""
    rng = random.Random(1512)
    for trial in range(150):
        stream = b"".join(_frame(rng, trial * 1000 + n) for n in range(rng.randrange(1, 90)))
        max_inflight = rng.randrange(1, 24)
        expected = _general(stream, _Grouping(), max_inflight)
        dispatcher, transport = _Grouping(), NullTransport(keep=True)
        protocol = RemotingProtocol(dispatcher, trial, frame_max=1 << 20, max_inflight=max_inflight)
        dispatcher.protocol = protocol
        protocol.connection_made(transport)
        protocol.data_received(stream)
        for _ in range(200):
            if not protocol.inflight and not protocol._decoder.buffered:
                break
            protocol.requests_finished(protocol.inflight)  # (reading resumes: the rest is processed soon)
            await asyncio.sleep(0)
        assert dispatcher.handed == expected, trial
        protocol.connection_lost(None)
