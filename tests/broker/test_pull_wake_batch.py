"""Pulls woken in one loop iteration (arrivals, deadlines) are re-run together in one callback of the next, in
the order they woke; a pull whose answer fails is logged and the others are still answered."""

from __future__ import annotations

import asyncio

from broker.processor.pull import wake_in_loop


class Recorder:
    def __init__(self, fail_on: object = None) -> None:
        self.ran: list[object] = []
        self.fail_on = fail_on

    def execute_request_when_wakeup(self, pr) -> None:  # noqa: ANN001
        self.ran.append(pr)
        if pr is self.fail_on:
            raise OSError("write failed")


class Pr:
    topic, queue_id = "T", 0


async def test_pulls_woken_in_one_iteration_run_in_one_callback(monkeypatch):
    loop = asyncio.get_running_loop()
    scheduled: list[object] = []
    call_soon = loop.call_soon

    def counting_call_soon(callback, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if getattr(callback, "__name__", "") == "_run":  # (the loop schedules its own callbacks too)
            scheduled.append(callback)
        return call_soon(callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_soon", counting_call_soon)
    processor = Recorder()
    wake = wake_in_loop(processor)
    prs = [Pr(), Pr(), Pr()]
    for pr in prs:
        wake(pr)
    assert processor.ran == []  # deferred: an arrival path never re-enters a pull
    assert len(scheduled) == 1
    await asyncio.sleep(0)
    assert processor.ran == prs
    wake(prs[0])  # the next iteration's wake-ups get their own callback
    assert len(scheduled) == 2
    await asyncio.sleep(0)
    assert processor.ran == [*prs, prs[0]]


async def test_a_failing_pull_does_not_cost_the_others_their_answers(capsys):
    prs = [Pr(), Pr(), Pr()]
    processor = Recorder(fail_on=prs[1])
    wake = wake_in_loop(processor)
    for pr in prs:
        wake(pr)
    await asyncio.sleep(0)
    assert processor.ran == prs
    assert "woken pull not answered" in capsys.readouterr().out
