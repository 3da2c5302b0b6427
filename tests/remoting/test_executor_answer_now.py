"""RequestExecutor.answer_now: a request the executor can run now is answered through its processor's synchronous
entry (``process_request_now``): no task, no coroutine, the same counts and answers as the coroutine path; the
``Pending`` rest of one that has to wait keeps a worker lent, so later requests queue and are swept as before."""

from __future__ import annotations

import asyncio

import pytest
import structlog
from remoting_helpers import FakeChannel, FnProcessor, task

from remoting.codes import ResponseCode
from remoting.command import FLAG_RESPONSE, RemotingCommand
from remoting.errors import RemotingError
from remoting.executor import RequestExecutor, RequestGroup
from remoting.pending import Pending, finish, start


async def started(workers: int) -> RequestExecutor:
    ex = RequestExecutor("pull", workers=workers, capacity=10)
    ex.start()
    await asyncio.sleep(0)  # the workers park
    return ex


def request(opaque: int, oneway: bool = False) -> RemotingCommand:
    return RemotingCommand.request(11, {"k": str(opaque)}, opaque=opaque, oneway=oneway)


class SyncProcessor:
    """A processor whose entry never waits; it records what the executor and channel counted while it ran."""

    def __init__(self, ex: RequestExecutor, answer=None, error: Exception | None = None) -> None:
        self.ex, self.answer, self.error = ex, answer, error
        self.seen: list[tuple[int, int, int]] = []  # (active, completed, channel in flight) during the call

    def process_request_now(self, channel, req: RemotingCommand):
        self.seen.append((self.ex.active, self.ex.completed, channel.in_flight))
        if self.error is not None:
            raise self.error
        return self.answer(req) if callable(self.answer) else self.answer


async def test_an_entry_that_answers_at_once_is_written_before_answer_now_returns_with_the_same_counts() -> None:
    ex = await started(2)
    ch = FakeChannel()
    proc = SyncProcessor(ex, lambda r: r.response(ResponseCode.SUCCESS, "ok"))
    assert ex.answer_now(ch, request(7), proc.process_request_now, None)
    assert proc.seen == [(1, 0, 1)]  # counted active and in flight on its channel while it ran
    [answer] = ch.sent
    assert (answer.opaque, answer.code, answer.remark, bool(answer.flag & FLAG_RESPONSE)) == (7, 0, "ok", True)
    assert (ex.active, ex.completed, ex.size, ch.in_flight, ch.finished) == (0, 1, 0, 0, 1)
    assert ex.can_run_now()  # no worker was taken
    # the same request through run_now (a RequestTask, the coroutine path): the same answer and counts
    ch2 = FakeChannel()
    ch2.request_started()
    ex.run_now(task(ch2, 7, FnProcessor(_async_of(proc))))
    assert [(a.opaque, a.code, a.remark) for a in ch2.sent] == [(7, 0, "ok")]
    assert (ex.active, ex.completed, ch2.in_flight) == (0, 2, 0)
    await ex.stop()


def _async_of(proc: SyncProcessor):
    async def process(channel, req):
        return proc.process_request_now(channel, req)

    return process


async def test_a_raising_entry_costs_one_system_error_and_one_warning() -> None:
    ex = await started(1)
    ch = FakeChannel()
    proc = SyncProcessor(ex, error=KeyError("boom"))
    with structlog.testing.capture_logs() as logs:
        assert ex.answer_now(ch, request(3), proc.process_request_now, None)
    [answer] = ch.sent
    assert (answer.opaque, answer.code, answer.remark) == (3, ResponseCode.SYSTEM_ERROR, "KeyError: 'boom'")
    assert [e["event"] for e in logs] == ["request processing failed"]
    assert (ex.active, ex.completed, ch.finished) == (0, 1, 1)
    # our own errors: their message alone
    proc.error = RemotingError("bad header")
    ex.answer_now(ch, request(4), proc.process_request_now, None)
    assert (ch.sent[-1].code, ch.sent[-1].remark) == (ResponseCode.SYSTEM_ERROR, "bad header")
    await ex.stop()


async def test_oneway_and_parked_requests_get_no_answer_but_are_counted() -> None:
    ex = await started(1)
    ch = FakeChannel()
    answers = SyncProcessor(ex, lambda r: r.response(ResponseCode.SUCCESS))
    assert ex.answer_now(ch, request(1, oneway=True), answers.process_request_now, None)
    failing = SyncProcessor(ex, error=ValueError("x"))
    assert ex.answer_now(ch, request(2, oneway=True), failing.process_request_now, None)  # not even an error
    parks = SyncProcessor(ex, None)  # a long poll: parked, answered later by whoever wakes it
    assert ex.answer_now(ch, request(3), parks.process_request_now, None)
    assert ch.sent == []
    assert (ex.active, ex.completed, ch.finished) == (0, 3, 3)
    await ex.stop()


async def test_the_hook_runs_first_and_its_answer_replaces_the_processor() -> None:
    ex = await started(1)
    ch = FakeChannel()
    proc = SyncProcessor(ex, lambda r: r.response(ResponseCode.SUCCESS))

    def hook(channel, req):
        return req.response(ResponseCode.NO_PERMISSION, "denied") if req.opaque == 1 else None

    ex.answer_now(ch, request(1), proc.process_request_now, hook)
    ex.answer_now(ch, request(2), proc.process_request_now, hook)
    assert [(a.opaque, a.code) for a in ch.sent] == [(1, ResponseCode.NO_PERMISSION), (2, ResponseCode.SUCCESS)]
    assert len(proc.seen) == 1
    await ex.stop()


async def test_answer_now_declines_whenever_run_now_would_not_run() -> None:
    ex = RequestExecutor("pull", workers=1, capacity=10)
    ch = FakeChannel()
    proc = SyncProcessor(ex, lambda r: r.response(0))
    assert not ex.answer_now(ch, request(1), proc.process_request_now, None)  # not started
    ex.start()
    assert not ex.answer_now(ch, request(1), proc.process_request_now, None)  # the workers have not parked yet
    await asyncio.sleep(0)
    ex.pause(10)
    assert not ex.answer_now(ch, request(1), proc.process_request_now, None)  # paused (a stuck pool)
    ex.resume()
    gate = asyncio.Event()

    async def slow(channel, req):
        await gate.wait()
        return req.response(0)

    ex.run_now(task(ch, 9, FnProcessor(slow)))  # the only worker is busy
    assert not ex.answer_now(ch, request(1), proc.process_request_now, None)
    assert proc.seen == [] and ch.in_flight == 0  # nothing counted for a declined request
    gate.set()
    await asyncio.sleep(0.01)
    assert ex.answer_now(ch, request(1), proc.process_request_now, None)
    await ex.stop()
    assert not ex.answer_now(ch, request(2), proc.process_request_now, None)  # stopped


async def test_a_pending_rest_keeps_its_worker_so_later_requests_queue_and_are_swept() -> None:
    gate = asyncio.get_running_loop().create_future()

    async def waits(channel, req):
        await gate
        return req.response(ResponseCode.SUCCESS, "late")

    ex = await started(1)
    ch = FakeChannel()

    def entry(channel, req):
        return start(waits(channel, req))

    assert ex.answer_now(ch, request(1), entry, None)
    assert ch.sent == [] and (ex.active, ex.completed, ch.in_flight) == (1, 0, 1)
    assert not ex.can_run_now()  # the one worker is lent to the rest of request 1
    assert not ex.answer_now(ch, request(2), entry, None)
    # so request 2 and 3 queue, as they would have, and the fast-failure sweep sees them
    assert ex.submit(task(ch, 2)) and ex.submit(task(ch, 3))
    ch.request_started()
    ch.request_started()
    assert ex.expire_head(ResponseCode.SYSTEM_BUSY, "[TIMEOUT_CLEAN_QUEUE]") is not None
    gate.set_result(None)
    while ch.finished < 3:
        await asyncio.sleep(0.01)
    assert [(a.opaque, a.remark) for a in ch.sent] == [(2, "[TIMEOUT_CLEAN_QUEUE]"), (1, "late"), (3, None)]
    assert (ex.active, ex.completed, ch.in_flight) == (0, 2, 0)
    assert ex.can_run_now()
    await ex.stop()


async def test_a_pending_rest_that_fails_after_its_wait_is_answered_system_error() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    async def reads_a_failure(channel, req):
        try:
            await fut
        except OSError as exc:
            raise RemotingError(f"store failed: {exc}") from exc

    ex = await started(1)
    ch = FakeChannel()
    ex.answer_now(ch, request(5), lambda c, r: start(reads_a_failure(c, r)), None)
    fut.set_exception(OSError("disk"))
    with structlog.testing.capture_logs() as logs:
        while ch.finished < 1:
            await asyncio.sleep(0.01)
    assert [(a.opaque, a.code, a.remark) for a in ch.sent] == [(5, ResponseCode.SYSTEM_ERROR, "store failed: disk")]
    assert [e["event"] for e in logs] == ["request processing failed"]
    assert (ex.active, ex.completed) == (0, 1)
    await ex.stop()


async def test_stopping_cancels_a_pending_rest_without_an_answer_and_releases_everything() -> None:
    cleaned: list[int] = []

    async def forever(channel, req):
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(req.opaque)

    ex = await started(1)
    ch = FakeChannel()
    ex.answer_now(ch, request(8), lambda c, r: start(forever(c, r)), None)
    await asyncio.sleep(0)
    await ex.stop(grace_s=0.05)
    assert cleaned == [8] and ch.sent == []
    assert (ex.active, ch.in_flight, ch.finished) == (0, 0, 1)


async def test_a_pending_rest_cancelled_before_its_task_ran_still_releases_its_request() -> None:
    """Stopped in the same loop turn: the rest's task never took a step; the request is still finished."""
    cleaned: list[int] = []

    async def forever(channel, req):
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append(req.opaque)

    ex = await started(1)
    ch = FakeChannel()
    ex.answer_now(ch, request(9), lambda c, r: start(forever(c, r)), None)
    for resumed in list(ex._eager):  # cancelled before its first step
        resumed.cancel()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert cleaned == [9] and ch.sent == [] and (ex.active, ex.completed, ch.in_flight) == (0, 1, 0)
    assert not ex._eager and ex.can_run_now()  # the lent worker is back
    await ex.stop()


async def test_start_and_finish_give_the_coroutines_value_or_exception() -> None:
    async def at_once():
        return 1

    assert start(at_once()) == 1

    async def raises_at_once():
        raise ValueError("now")

    with pytest.raises(ValueError, match="now"):
        start(raises_at_once())
    loop = asyncio.get_running_loop()
    fut = loop.create_future()

    async def later():
        await asyncio.sleep(0)  # a bare yield first
        return await fut + 1

    pending = start(later())
    assert isinstance(pending, Pending) and pending.yielded is None
    loop.call_soon(fut.set_result, 41)
    assert await finish(pending) == 42

    async def fails_later():
        await asyncio.sleep(0)
        raise KeyError("later")

    with pytest.raises(KeyError):
        await finish(start(fails_later()))


async def test_a_group_with_a_synchronous_entry_is_answered_at_once_in_order_and_counted() -> None:
    ex = await started(1)
    ch = FakeChannel()
    calls: list[int] = []

    def process_requests_now(channel, requests):
        calls.append(len(requests))
        return [r.response(ResponseCode.SUCCESS, str(r.opaque)) for r in requests]

    requests = [request(o) for o in (1, 2, 3)]
    ch.requests_started(3)
    ex.run_group_now(RequestGroup(ch, requests, object(), None, now=process_requests_now))
    assert calls == [3]
    assert [(a.opaque, a.remark) for a in ch.sent] == [(1, "1"), (2, "2"), (3, "3")]
    assert (ex.active, ex.completed, ch.in_flight) == (0, 3, 0) and ex.can_run_now()
    await ex.stop()


async def test_a_group_whose_entry_waits_holds_its_worker_until_its_answers_are_written() -> None:
    gate = asyncio.get_running_loop().create_future()

    class Proc:
        async def process_requests(self, channel, requests):
            await gate
            return [r.response(ResponseCode.SUCCESS) for r in requests]

    ex = await started(1)
    ch = FakeChannel()
    ch.requests_started(2)
    ex.run_group_now(RequestGroup(ch, [request(1), request(2)], Proc()))  # no sync entry: the coroutine, started
    assert ch.sent == [] and not ex.can_run_now() and ex.active == 1
    gate.set_result(None)
    while ch.in_flight:
        await asyncio.sleep(0.01)
    assert [a.opaque for a in ch.sent] == [1, 2]
    assert (ex.active, ex.completed) == (0, 2) and ex.can_run_now()
    await ex.stop()


async def test_a_group_entry_that_raises_answers_each_request_system_error_once() -> None:
    ex = await started(1)
    ch = FakeChannel()

    def broken(channel, requests):
        raise RuntimeError("group bug")

    ch.requests_started(2)
    with structlog.testing.capture_logs() as logs:
        ex.run_group_now(RequestGroup(ch, [request(1), request(2)], object(), None, now=broken))
    assert [(a.opaque, a.code, a.remark) for a in ch.sent] == [
        (1, ResponseCode.SYSTEM_ERROR, "RuntimeError: group bug"),
        (2, ResponseCode.SYSTEM_ERROR, "RuntimeError: group bug"),
    ]
    assert [e["event"] for e in logs] == ["request group processing failed"]
    assert (ex.active, ex.completed, ch.in_flight) == (0, 2, 0)
    await ex.stop()
