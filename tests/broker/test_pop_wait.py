"""PopService long polling: an arrival wakes the oldest waiting receive of each group, not all of them
(a push consumer keeps one receive per assigned queue parked; waking all made each return nearly empty)."""

from __future__ import annotations

import asyncio

from broker.pop import PopService


async def no_dlq(group, msg) -> bool:
    return False


def service() -> PopService:
    return PopService(store=None, offsets=None, forward_to_dlq=no_dlq)


async def parked(pop: PopService, group: str, topic: str = "T", timeout_ms: int = 5_000) -> asyncio.Task[None]:
    task = asyncio.ensure_future(pop.wait(group, topic, timeout_ms))
    await asyncio.sleep(0)  # parked
    return task


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_an_arrival_wakes_only_the_oldest_waiter_of_a_group():
    pop = service()
    first, second = await parked(pop, "G"), await parked(pop, "G")
    pop.notify_arrival("T")
    await settle()
    assert first.done() and not second.done()
    pop.notify_arrival("T")
    await settle()
    assert second.done()
    assert pop._waiters == {}


async def test_an_arrival_wakes_one_waiter_of_each_group_and_none_of_other_topics():
    pop = service()
    a1, a2, b1, other = (
        await parked(pop, "A"),
        await parked(pop, "A"),
        await parked(pop, "B"),
        await parked(pop, "A", "U"),
    )
    pop.notify_arrival("T")
    await settle()
    assert a1.done() and b1.done()
    assert not a2.done() and not other.done()
    for task in (a2, other):
        task.cancel()
    await asyncio.gather(a2, other, return_exceptions=True)
    assert pop._waiters == {}


async def test_a_wake_is_not_lost_when_the_woken_waiter_is_cancelled():
    pop = service()
    first, second = await parked(pop, "G"), await parked(pop, "G")
    pop.notify_arrival("T")
    first.cancel()  # the call ended after the wake, before the receive could pop
    await settle()
    # either the first returned anyway (asyncio.wait_for of 3.11 keeps a result that is there) and its
    # receive pops, or it was cancelled and the wake went on to the second
    assert not first.cancelled() or (second.done() and not second.cancelled())
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)
    assert pop._waiters == {}


async def test_a_waiter_times_out_and_leaves_nothing_behind():
    pop = service()
    await pop.wait("G", "T", 20)
    assert pop._waiters == {}
    pop.notify_arrival("T")  # nobody waiting: nothing to do
