"""Pulls woken in one loop iteration (arrivals, deadlines) are re-run together in one callback of the next, in
the order they woke; a pull whose answer fails is logged and the others are still answered."""

from __future__ import annotations

import asyncio

from broker.long_polling import PullRequest
from broker.processor.pull import PullMessageProcessor, wake_in_loop
from remoting.codes import ResponseCode


class Recorder:
    def __init__(self) -> None:
        self.ran: list[object] = []
        self.calls = 0

    def execute_requests_when_wakeup(self, prs) -> None:  # noqa: ANN001
        self.calls += 1
        self.ran.extend(prs)


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
    assert processor.ran == prs and processor.calls == 1
    wake(prs[0])  # the next iteration's wake-ups get their own callback
    assert len(scheduled) == 2
    await asyncio.sleep(0)
    assert processor.ran == [*prs, prs[0]]


class Channel:
    def __init__(self, active: bool = True, fail: bool = False) -> None:
        self.is_active = active
        self.fail = fail
        self.sent: list[object] = []

    def send(self, response) -> None:  # noqa: ANN001
        if self.fail:
            raise OSError("write failed")
        self.sent.append(response)


class Request:
    def response(self, code, remark):  # noqa: ANN001, ANN201
        return ("error", code, remark)


async def test_a_failing_pull_does_not_cost_the_others_their_answers(capsys):
    """The processor's batch: a pull whose write fails is logged, one whose re-run raises is answered
    SYSTEM_ERROR, a closed channel's pull is not run, and every other pull is answered, in order."""
    processor = PullMessageProcessor.__new__(PullMessageProcessor)
    ran: list[object] = []

    def process(channel, request, allow_suspend, header):  # noqa: ANN001, ANN202
        ran.append(header)
        if header == "raise":
            raise ValueError("boom")
        return ("answer", header)

    processor._process = process  # type: ignore[method-assign]
    channels = [Channel(), Channel(fail=True), Channel(), Channel(active=False), Channel()]
    headers = ["a", "b", "raise", "closed", "e"]
    prs = [PullRequest(Request(), ch, "T", 0, 0, None, None, h) for ch, h in zip(channels, headers, strict=True)]
    wake = wake_in_loop(processor)
    for pr in prs:
        wake(pr)
    await asyncio.sleep(0)
    assert ran == ["a", "b", "raise", "e"]
    assert channels[0].sent == [("answer", "a")] and channels[4].sent == [("answer", "e")]
    assert channels[2].sent == [("error", ResponseCode.SYSTEM_ERROR, "boom")]
    out = capsys.readouterr().out
    assert "woken pull not answered" in out and "woken pull failed" in out
