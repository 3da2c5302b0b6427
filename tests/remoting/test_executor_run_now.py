"""RequestExecutor.run_now: a request runs on the dispatcher's stack, in an idle worker's place, when nothing waits."""

from __future__ import annotations

import asyncio

from remoting_helpers import FakeChannel, FnProcessor, task

from remoting.executor import RequestExecutor


async def started(workers: int) -> RequestExecutor:
    ex = RequestExecutor("send", workers=workers, capacity=10)
    ex.start()
    await asyncio.sleep(0)  # the workers park
    return ex


async def test_a_request_that_needs_no_wait_is_answered_before_run_now_returns() -> None:
    ex = await started(2)
    ch = FakeChannel()
    assert ex.can_run_now()
    ex.run_now(task(ch, 7, FnProcessor()))
    assert [c.opaque for c in ch.sent] == [7] and ch.finished == 1
    assert (ex.active, ex.completed, ex.size) == (0, 1, 0)
    assert ex.can_run_now()  # the worker it stood in for is idle again
    await ex.stop()


async def test_a_request_that_waits_keeps_its_worker_and_later_ones_queue_as_before() -> None:
    gate = asyncio.Event()

    async def slow(channel, request):
        await gate.wait()
        return request.response(0)

    ex = await started(1)
    ch = FakeChannel()
    proc = FnProcessor(slow)
    ex.run_now(task(ch, 1, proc))
    assert ch.sent == [] and ex.active == 1
    assert not ex.can_run_now()  # the one worker is lent to request 1
    assert ex.submit(task(ch, 2, proc)) and ex.submit(task(ch, 3, proc))
    assert ex.size == 2
    # the queue is swept as before (fast failure answers its head)
    expired = ex.expire_head(2, "[TIMEOUT_CLEAN_QUEUE]")
    assert expired is not None and [c.opaque for c in ch.sent] == [2]
    gate.set()
    while ch.finished < 3:
        await asyncio.sleep(0.01)
    assert [c.opaque for c in ch.sent] == [2, 1, 3]  # request 3 ran on the worker request 1 gave back
    assert (ex.active, ex.completed) == (0, 2)
    await ex.stop()


async def test_a_failed_wait_reaches_the_processor_and_a_broken_one_costs_one_answer() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    async def awaits_a_failure(channel, request):
        try:
            await fut
        except ValueError as exc:
            return request.response(0, f"saw {exc}")
        return request.response(0, "no error")

    async def breaks(channel, request):
        await asyncio.sleep(0)
        raise KeyError("boom")

    ex = await started(2)
    ch = FakeChannel()
    ex.run_now(task(ch, 1, FnProcessor(awaits_a_failure)))
    ex.run_now(task(ch, 2, FnProcessor(breaks)))
    fut.set_exception(ValueError("bad disk"))
    while ch.finished < 2:
        await asyncio.sleep(0.01)
    answers = {c.opaque: (c.code, c.remark) for c in ch.sent}
    assert answers == {1: (0, "saw bad disk"), 2: (1, "KeyError: 'boom'")}
    assert ex.active == 0 and ex.can_run_now()
    await ex.stop()


async def test_stop_waits_for_a_request_run_now_started_then_cancels_it() -> None:
    async def forever(channel, request):
        await asyncio.Event().wait()

    ex = await started(1)
    ch = FakeChannel()
    ex.run_now(task(ch, 1, FnProcessor(forever)))
    assert ex.active == 1
    await ex.stop(grace_s=0.05)
    assert ch.finished == 1 and ex.active == 0 and ch.sent == []


async def test_nothing_runs_now_while_paused_stopping_or_queued() -> None:
    ex = RequestExecutor("send", workers=2, capacity=10)
    assert not ex.can_run_now()  # not started
    ex.start()
    assert not ex.can_run_now()  # workers not parked yet
    await asyncio.sleep(0)
    assert ex.can_run_now()
    ex.pause(10)
    assert not ex.can_run_now()
    ex.resume()
    ex.queue.append(task(FakeChannel(), 1, FnProcessor()))  # a task not yet taken by a worker
    assert not ex.can_run_now()
    ex.queue.clear()
    await ex.stop()
    assert not ex.can_run_now()


async def test_a_waiting_request_cancelled_at_any_point_still_releases_its_channel_and_worker() -> None:
    loop = asyncio.get_running_loop()

    async def waits(channel, request):
        await loop.create_future()

    async def yields(channel, request):
        while True:
            await asyncio.sleep(0)  # a bare yield each time

    ex = await started(3)
    ch = FakeChannel()
    ex.run_now(task(ch, 1, FnProcessor(waits)))
    for resumed in list(ex._eager):  # cancelled before its first step
        resumed.cancel()
    ex.run_now(task(ch, 2, FnProcessor(waits)))
    ex.run_now(task(ch, 3, FnProcessor(yields)))
    await asyncio.sleep(0.01)
    assert ex.active == 2
    for resumed in list(ex._eager):  # cancelled while waiting on a future, and between bare yields
        resumed.cancel()
    await asyncio.sleep(0.01)
    assert ch.finished == 3 and ch.sent == [] and ex.active == 0 and not ex._eager
    assert ex.can_run_now() and len(ex._idle) == 3
    await ex.stop()
