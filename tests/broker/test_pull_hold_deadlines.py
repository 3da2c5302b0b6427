"""The hold service answers each parked pull at its own deadline with ONE loop timer for all of them (no
``call_later`` handle per park, none cancelled per arrival), and an arrival wakes a parked pull at once."""

from __future__ import annotations

import asyncio

from broker.long_polling import DEADLINE_RESOLUTION_S, PullRequest, PullRequestHoldService


class Channel:
    is_active = True


def parked(queue_id: int, offset: int = 5, channel: object = None, flt: object = None) -> PullRequest:
    return PullRequest(None, channel or Channel(), "T", queue_id, offset, None, flt, None)


def deadlines(hold: PullRequestHoldService) -> dict[int, float]:
    """id(parked pull) → its deadline, from the hold service's heap."""
    return {id(pr): deadline for deadline, _, pr in hold._deadlines}


def service() -> tuple[PullRequestHoldService, list[tuple[PullRequest, float]]]:
    woken: list[tuple[PullRequest, float]] = []
    loop = asyncio.get_running_loop()
    return PullRequestHoldService(lambda pr: woken.append((pr, loop.time())), lambda t, q: 0), woken


async def test_each_parked_pull_is_answered_at_its_own_deadline():
    """Deadlines in any order, two on one queue: each woken once, in deadline order, not before its deadline (less
    the loop's millisecond) and not long after it."""
    hold, woken = service()
    loop = asyncio.get_running_loop()
    prs = {ms: parked(q) for q, ms in enumerate((300, 100, 200))}
    prs[301] = parked(0)  # the same queue as the 300 ms one
    start = loop.time()
    for ms, pr in prs.items():
        hold.suspend(pr, ms)
    due = deadlines(hold)
    await asyncio.sleep(0.6)
    assert [pr for pr, _ in woken] == [prs[100], prs[200], prs[300], prs[301]]
    for (pr, at), ms in zip(woken, (100, 200, 300, 301), strict=True):
        assert due[id(pr)] - DEADLINE_RESOLUTION_S <= at < start + ms / 1000 + 0.25, ms
    assert hold.table == {} and hold.parked_count == 0


async def test_a_caught_up_consumer_makes_no_timer_per_park(monkeypatch):
    """Park, arrival, park again, 200 times (a caught-up consumer): one timer armed in all, none cancelled."""
    loop = asyncio.get_running_loop()
    armed: list[float] = []
    call_at = loop.call_at

    def counting_call_at(when, callback, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        armed.append(when)
        return call_at(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting_call_at)
    monkeypatch.setattr(loop, "call_later", lambda *a, **k: (_ for _ in ()).throw(AssertionError("call_later")))
    hold, woken = service()
    for offset in range(200):
        pr = parked(0, offset)
        hold.suspend(pr, 15_000)
        hold.notify_message_arriving("T", 0, offset + 1, 0, {})
        assert woken[-1][0] is pr
    assert len(woken) == 200 and len(armed) == 1
    hold.shutdown()


async def test_the_timer_of_a_woken_pull_arms_itself_for_the_next_deadline():
    """The timer armed for a pull an arrival woke fires, finds nothing due, and the next parked pull is still
    answered at its own (later) deadline, not at the earlier one."""
    hold, woken = service()
    loop = asyncio.get_running_loop()
    early, late = parked(0), parked(1)
    hold.suspend(early, 50)
    hold.suspend(late, 250)
    late_deadline = deadlines(hold)[id(late)]
    hold.notify_message_arriving("T", 0, 6, 0, {})
    assert [pr for pr, _ in woken] == [early]
    start = loop.time()
    await asyncio.sleep(0.12)
    assert len(woken) == 1  # the 50 ms timer fired: nothing else was due
    await asyncio.sleep(0.3)
    assert [pr for pr, _ in woken] == [early, late]
    assert woken[1][1] >= late_deadline - DEADLINE_RESOLUTION_S and woken[1][1] - start < 0.4


async def test_a_shorter_timeout_parked_later_rearms_the_timer():
    hold, woken = service()
    loop = asyncio.get_running_loop()
    start = loop.time()
    hold.suspend(parked(0), 5_000)
    short = parked(1)
    hold.suspend(short, 80)
    await asyncio.sleep(0.3)
    assert [pr for pr, _ in woken] == [short] and woken[0][1] - start < 0.25
    assert len(hold.shutdown()) == 1  # the 5 s pull is handed back, its timer cancelled
    await asyncio.sleep(0)
    assert len(woken) == 1


async def test_an_arrival_wakes_only_the_pulls_it_satisfies():
    """Several pulls on one queue: an arrival wakes those behind the new max offset whose filter matches; the rest
    stay parked (and a closed channel's pulls are dropped, never woken)."""

    class OnlyTag:
        def is_matched_by_consume_queue(self, code):  # noqa: ANN001, ANN202
            return code == 7

        def is_matched_by_properties(self, properties):  # noqa: ANN001, ANN202
            return True

    hold, woken = service()
    behind, ahead, filtered = parked(0, 5), parked(0, 9), parked(0, 5, flt=OnlyTag())
    for pr in (behind, ahead, filtered):
        hold.suspend(pr, 15_000)
    hold.notify_message_arriving("T", 0, 6, 3, {})
    assert [pr for pr, _ in woken] == [behind]
    assert hold.table[("T", 0)] == [ahead, filtered]
    hold.notify_message_arriving("T", 0, 7, 7, {})
    assert [pr for pr, _ in woken] == [behind, filtered]
    hold.on_channel_closed(ahead.channel)
    assert hold.table == {}
    hold.shutdown()


async def test_woken_pulls_do_not_pile_up_in_the_deadline_heap():
    """A caught-up consumer parks and is woken 5,000 times within one suspend timeout: the entries its woken pulls
    leave on the deadline heap are dropped as they outnumber the parked pulls, and a pull parked meanwhile on an
    idle queue is still answered at its deadline."""
    hold, woken = service()
    idle = parked(7)
    hold.suspend(idle, 150)
    for offset in range(5_000):
        hold.suspend(parked(0, offset), 15_000)
        hold.notify_message_arriving("T", 0, offset + 1, 0, {})
    assert len(woken) == 5_000
    assert len(hold._deadlines) <= 2_048, len(hold._deadlines)
    await asyncio.sleep(0.4)
    assert woken[-1][0] is idle and hold.table == {}
    hold.shutdown()


async def test_many_idle_parked_pulls_are_each_answered_once_at_their_deadline():
    """Thousands parked on idle queues, each due at its own time: every one answered once, in deadline order."""
    hold, woken = service()
    prs = [parked(q) for q in range(3_000)]
    for i, pr in enumerate(prs):
        hold.suspend(pr, 50 + i // 30)  # 100 distinct deadlines
    await asyncio.sleep(0.5)
    assert [pr for pr, _ in woken] == prs
    assert hold.table == {} and hold._deadlines == []
