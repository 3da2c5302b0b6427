"""Requests decoded from one read, handed to a processor with ``process_requests`` in one call (``RequestGroup``).

Each test writes its frames in one write so they arrive in one read (loopback, a few hundred bytes); the
groups the processor saw are recorded. Without the grouping the processor's ``process_requests`` is never
called and these fail.
"""

from __future__ import annotations

import asyncio

import pytest
import structlog
from remoting_helpers import FnProcessor, expect_silence, read_frame

from remoting.codes import ResponseCode
from remoting.command import RemotingCommand
from remoting.executor import RequestExecutor
from remoting.server import REJECT_REQUEST_REMARK


class GroupProcessor:
    """Answers each request with its opaque in a header field; records every group it was handed."""

    def __init__(self, *, fail: bool = False, wait: bool = True) -> None:
        self.groups: list[list[int]] = []
        self.singles: list[int] = []
        self.rejects: set[int] = set()  # reject_request calls (1-based) that answer True
        self.reject_calls = 0
        self.fail = fail
        self.wait = wait

    def groupable(self, request) -> bool:
        return request.ext_fields.get("solo") is None

    def reject_request(self) -> bool:
        self.reject_calls += 1
        return self.reject_calls in self.rejects

    async def process_request(self, channel, request):
        self.singles.append(request.opaque)
        return request.response(0, None, {"seen": str(request.opaque)})

    async def process_requests(self, channel, requests):
        self.groups.append([r.opaque for r in requests])
        if self.wait:
            await asyncio.sleep(0)  # a group that waits: it goes on as a task, its worker lent
        if self.fail:
            raise ValueError("group boom")
        return [r.response(0, None, {"seen": str(r.opaque)}) for r in requests]


def frames(code: int, opaques, *, oneway=(), solo=()) -> bytes:
    return b"".join(
        RemotingCommand.request(
            code, {"n": str(o)} | ({"solo": "1"} if o in solo else {}), b"b", opaque=o, oneway=o in oneway
        ).to_bytes()
        for o in opaques
    )


async def open_raw(server):
    return await asyncio.open_connection("127.0.0.1", server.port)


async def read_all(reader, n):
    return [await read_frame(reader) for _ in range(n)]


async def test_the_requests_of_one_read_reach_the_processor_in_one_call(make_server) -> None:
    processor = GroupProcessor()
    executor = RequestExecutor("send", 1, 100)
    server = await make_server({10: (processor, executor)})
    reader, writer = await open_raw(server)
    writer.write(frames(10, range(1, 11)))
    answers = await read_all(reader, 10)
    assert [a.opaque for a in answers] == list(range(1, 11))
    assert all(a.code == 0 and a.ext_fields == {"seen": str(a.opaque)} for a in answers)
    assert processor.groups == [list(range(1, 11))] and processor.singles == []
    # each request was counted by the executor and in flight on its connection, and released
    assert executor.completed == 10 and executor.active == 0
    assert server.channels[0]._protocol.inflight == 0
    assert processor.reject_calls == 10
    writer.close()


async def test_reject_and_the_request_hook_still_see_each_request_of_a_group(make_server) -> None:
    processor = GroupProcessor()
    processor.rejects = {2}
    server = await make_server({10: (processor, RequestExecutor("send", 1, 100))})
    server.set_request_hook(
        lambda channel, request: request.response(ResponseCode.NO_PERMISSION, "denied") if request.opaque == 4 else None
    )
    reader, writer = await open_raw(server)
    writer.write(frames(10, range(1, 7)))
    answers = {a.opaque: a for a in await read_all(reader, 6)}
    assert (answers[2].code, answers[2].remark) == (ResponseCode.SYSTEM_BUSY, REJECT_REQUEST_REMARK)
    assert (answers[4].code, answers[4].remark) == (ResponseCode.NO_PERMISSION, "denied")
    assert [o for o, a in sorted(answers.items()) if a.code == 0] == [1, 3, 5, 6]
    assert processor.groups == [[1, 3, 5, 6]]
    writer.close()


async def test_a_failing_group_answers_each_request_once_and_no_oneway(make_server) -> None:
    processor = GroupProcessor(fail=True)
    executor = RequestExecutor("send", 1, 100)
    server = await make_server({10: (processor, executor)})
    reader, writer = await open_raw(server)
    with structlog.testing.capture_logs() as logs:
        writer.write(frames(10, range(1, 5), oneway={2}))
        answers = await read_all(reader, 3)
        await expect_silence(reader)
    assert [(a.opaque, a.code, a.remark) for a in answers] == [(o, 1, "ValueError: group boom") for o in (1, 3, 4)]
    assert len([e for e in logs if e["event"] == "request group processing failed"]) == 1
    assert executor.completed == 4 and server.channels[0]._protocol.inflight == 0
    writer.write(frames(10, [9]))  # the connection and the executor go on
    assert (await read_frame(reader)).opaque == 9
    writer.close()


async def test_other_codes_keep_their_place_between_groups(make_server) -> None:
    processor = GroupProcessor(wait=False)
    other = FnProcessor()
    server = await make_server(
        {10: (processor, RequestExecutor("send", 1, 100)), 11: (other, RequestExecutor("p", 1, 9))}
    )
    reader, writer = await open_raw(server)
    writer.write(frames(10, [1, 2, 3]) + frames(11, [4]) + frames(10, [5, 6]) + frames(10, [7, 8, 9, 10], solo={8}))
    answers = await read_all(reader, 10)
    assert [a.opaque for a in answers] == list(range(1, 11))
    assert [c.opaque for c in other.calls] == [4]
    # a request its processor does not group (groupable: False) goes alone, in its place
    assert processor.groups == [[1, 2, 3], [5, 6, 7], [9, 10]] and processor.singles == [8]
    writer.close()


async def test_a_busy_executor_takes_the_run_one_request_at_a_time(make_server) -> None:
    processor = GroupProcessor()
    executor = RequestExecutor("send", 1, 100)
    server = await make_server({10: (processor, executor)})
    executor.pause(0.2)  # as if its only worker were stuck: nothing can run now, so the run queues
    reader, writer = await open_raw(server)
    writer.write(frames(10, range(1, 6)))
    answers = await read_all(reader, 5)
    assert [a.opaque for a in answers] == [1, 2, 3, 4, 5]
    assert processor.groups == [] and processor.singles == [1, 2, 3, 4, 5]
    assert executor.peak == 5  # the queue (what the fast-failure sweep reads) saw every one of them
    writer.close()


class _NotACommand:
    """An answer a buggy processor might return: it has no opaque to set."""

    __slots__ = ()


@pytest.mark.parametrize("not_a_command", [False, True])
async def test_an_answer_that_cannot_be_written_costs_only_itself(make_server, not_a_command: bool) -> None:
    """The group's answers leave in one ``Channel.send_many``: one that cannot be encoded (a value orjson cannot
    write) or is not a command is logged once, as ``write_response`` logs it, and the others arrive."""

    class Answers(GroupProcessor):
        async def process_requests(self, channel, requests):
            self.groups.append([r.opaque for r in requests])
            answers = [r.response(0, None, {"seen": str(r.opaque)}) for r in requests]
            answers[2].ext_fields["bad"] = object()  # opaque 3: orjson cannot encode it
            if not_a_command:
                answers[3] = _NotACommand()  # opaque 4
            return answers

    processor = Answers()
    server = await make_server({10: (processor, RequestExecutor("send", 1, 100))})
    reader, writer = await open_raw(server)
    with structlog.testing.capture_logs() as logs:
        writer.write(frames(10, range(1, 7)))
        answers = await read_all(reader, 4 if not_a_command else 5)
        await expect_silence(reader)
    lost = [3, 4] if not_a_command else [3]
    assert processor.groups == [[1, 2, 3, 4, 5, 6]]
    assert [a.opaque for a in answers] == [o for o in range(1, 7) if o not in lost]
    assert all(a.ext_fields == {"seen": str(a.opaque)} for a in answers)
    unwritten = [e for e in logs if e["event"] == "cannot write response"]
    assert sorted(e["opaque"] for e in unwritten) == lost and all(e["code"] == 10 for e in unwritten)
    writer.close()


async def test_a_failing_reject_check_lets_its_request_in_and_the_others_are_still_checked(make_server) -> None:
    """As ``dispatch``: one ``reject_request`` call per request of a group; one that raises is logged and lets its
    request in; one that says busy is answered [REJECTREQUEST]."""

    class Flaky(GroupProcessor):
        def reject_request(self) -> bool:
            self.reject_calls += 1
            if self.reject_calls == 2:
                raise RuntimeError("busy check broken")
            return self.reject_calls == 3

    processor = Flaky()
    server = await make_server({10: (processor, RequestExecutor("send", 1, 100))})
    reader, writer = await open_raw(server)
    with structlog.testing.capture_logs() as logs:
        writer.write(frames(10, range(1, 5)))
        answers = await read_all(reader, 4)
        await expect_silence(reader)
    assert processor.reject_calls == 4 and processor.groups == [[1, 2, 4]]
    assert [(a.opaque, a.code) for a in answers] == [(3, ResponseCode.SYSTEM_BUSY), (1, 0), (2, 0), (4, 0)]
    assert len([e for e in logs if e["event"] == "reject_request failed"]) == 1
    assert server.channels[0]._protocol.inflight == 0
    writer.close()


async def test_a_lone_request_whose_reject_check_fails_gets_in_and_a_busy_one_is_refused(make_server) -> None:
    """``dispatch`` (one request): a ``reject_request`` that raises is logged once and lets its request in; one that
    says busy answers [REJECTREQUEST], never a oneway; the connection goes on."""

    class Flaky(GroupProcessor):
        def reject_request(self) -> bool:
            self.reject_calls += 1
            if self.reject_calls == 1:
                raise RuntimeError("busy check broken")
            return self.reject_calls in (2, 3)

    processor = Flaky()
    server = await make_server({10: (processor, RequestExecutor("send", 1, 100))})
    reader, writer = await open_raw(server)
    with structlog.testing.capture_logs() as logs:
        got = []
        for opaque in (1, 2, 3, 4):  # one a write, each answered before the next: no group
            writer.write(frames(10, [opaque], oneway={3}))
            if opaque != 3:
                got.append(await read_frame(reader))
            else:
                await expect_silence(reader)  # (the oneway is not answered; 4 must not share its read)
    assert [(a.opaque, a.code) for a in got] == [(1, 0), (2, ResponseCode.SYSTEM_BUSY), (4, 0)]
    assert got[1].remark == REJECT_REQUEST_REMARK
    assert processor.singles == [1, 4] and processor.groups == []
    failed = [e for e in logs if e["event"] == "reject_request failed"]
    assert len(failed) == 1 and failed[0]["code"] == 10 and failed[0]["log_level"] == "error"
    writer.close()
