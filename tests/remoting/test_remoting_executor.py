"""RequestExecutor / RequestTask on their own: bounds, counters, fast-failure hooks, draining stop."""

from __future__ import annotations

import asyncio

from remoting_helpers import FakeChannel, FnProcessor, task

from remoting.executor import RequestExecutor


async def test_bounded_queue_counters_and_fifo_order() -> None:
    gate = asyncio.Event()
    order = []

    async def record(channel, request):
        order.append(request.opaque)
        await gate.wait()
        return request.response(0)

    ex = RequestExecutor("send", workers=1, capacity=3)
    ex.start()
    ch = FakeChannel()
    proc = FnProcessor(record)
    assert all(ex.submit(task(ch, i, proc)) for i in range(1, 4))
    assert ex.size == 3 and ex.peak == 3
    assert not ex.submit(task(ch, 4, proc)) and ex.rejected == 1
    await asyncio.sleep(0.01)  # the worker takes the head, making room
    assert ex.size == 2 and ex.active == 1
    assert ex.submit(task(ch, 5, proc))
    gate.set()
    while ch.finished < 4:
        await asyncio.sleep(0.01)
    assert order == [1, 2, 3, 5] and [c.opaque for c in ch.sent] == [1, 2, 3, 5]
    assert ex.completed == 4
    await ex.stop()


async def test_expire_head_answers_and_worker_skips_it() -> None:
    now = [1_000]
    ex = RequestExecutor("send", workers=1, capacity=10, now_ms=lambda: now[0])
    ch = FakeChannel()
    proc = FnProcessor()
    ex._accepting = True  # queue without workers: exercise the sweeper's view of the queue
    ex.submit(task(ch, 1, proc, create_ms=ex.now_ms()))
    ex.submit(task(ch, 2, proc, create_ms=ex.now_ms(), oneway=True))
    now[0] += 250
    assert ex.head_wait_ms() == 250
    expired = ex.expire_head(2, "[TIMEOUT_CLEAN_QUEUE]broker busy")
    assert expired is not None and expired.stopped and ex.expired == 1
    assert [(c.code, c.opaque, c.remark) for c in ch.sent] == [(2, 1, "[TIMEOUT_CLEAN_QUEUE]broker busy")]
    ex.expire_head(2, "x")  # oneway head: counted, not answered
    assert ex.expired == 2 and len(ch.sent) == 1 and ch.finished == 2
    assert ex.expire_head(2, "x") is None


async def test_stopped_task_in_queue_is_not_run() -> None:
    ex = RequestExecutor("send", workers=1, capacity=10)
    ch = FakeChannel()
    proc = FnProcessor()
    t = task(ch, 1, proc)
    ex._accepting = True
    ex.submit(t)
    t.return_response(2, "busy")  # answered by the sweeper while still queued
    t.return_response(2, "busy")  # idempotent
    ex.start()
    ex.submit(task(ch, 2, proc))
    while ch.finished < 2:
        await asyncio.sleep(0.01)
    assert proc.calls and [c.opaque for c in proc.calls] == [2]
    assert [(c.opaque, c.code) for c in ch.sent] == [(1, 2), (2, 0)]
    await ex.stop()


async def test_stop_drains_then_refuses() -> None:
    async def slow(channel, request):
        await asyncio.sleep(0.05)
        return request.response(0)

    ex = RequestExecutor("send", workers=2, capacity=100)
    ex.start()
    ch = FakeChannel()
    proc = FnProcessor(slow)
    for i in range(6):
        ex.submit(task(ch, i, proc))
    await ex.stop(grace_s=5)
    assert len(ch.sent) == 6 and not ex.running
    assert not ex.submit(task(ch, 99, proc))


async def test_stop_gives_up_after_grace() -> None:
    async def forever(channel, request):
        await asyncio.Event().wait()

    ex = RequestExecutor("send", workers=1, capacity=100)
    ex.start()
    ch = FakeChannel()
    for i in range(3):
        ex.submit(task(ch, i, FnProcessor(forever)))
    await asyncio.sleep(0.01)
    await asyncio.wait_for(ex.stop(grace_s=0.1), 5)
    assert ex.size == 0 and ch.finished == 3 and ch.sent == []


async def test_processor_exception_keeps_the_worker_alive() -> None:
    async def flaky(channel, request):
        if request.opaque == 1:
            raise KeyError("k")
        return request.response(0)

    ex = RequestExecutor("send", workers=1, capacity=10)
    ex.start()
    ch = FakeChannel()
    ex.submit(task(ch, 1, FnProcessor(flaky)))
    ex.submit(task(ch, 2, FnProcessor(flaky)))
    while ch.finished < 2:
        await asyncio.sleep(0.01)
    assert [(c.opaque, c.code, c.remark) for c in ch.sent] == [(1, 1, "KeyError: 'k'"), (2, 0, None)]
    await ex.stop()
