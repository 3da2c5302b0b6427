"""Pulls woken by arrivals are re-run in rounds (`broker.pull_wake.PullWakeRounds`, upstream's reput rounds): the pulls
woken in one round run together in one callback at its end, in the order they woke; a deadline's pull runs in the next
loop turn, taking the waiting round with it; the shutdown runs what waits; a pull whose answer fails is logged and the
others are still answered; a round whose pulls answered BUSY_MESSAGES_PER_PULL or more messages each makes the next
round BUSY_ROUND_S long, until one answers fewer. The loop's timer is captured here, so the round ends when the test
says."""

from __future__ import annotations

import asyncio

import pytest

from broker.long_polling import PullRequest
from broker.processor.pull import PullMessageProcessor
from broker.pull_wake import BUSY_MESSAGES_PER_PULL, BUSY_ROUND_S, WAKE_ROUND_S, PullWakeRounds
from remoting.codes import ResponseCode


class Recorder:
    def __init__(self) -> None:
        self.ran: list[object] = []
        self.calls = 0

    def execute_requests_when_wakeup(self, prs) -> None:  # noqa: ANN001
        self.calls += 1
        self.ran.extend(prs)


class Counting(Recorder):
    """A processor whose rounds answer ``answered`` messages (None: not counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.answered: int | None = 0

    def execute_requests_when_wakeup(self, prs) -> int | None:  # noqa: ANN001
        super().execute_requests_when_wakeup(prs)
        return self.answered


class Pr:
    topic, queue_id = "T", 0


class Timers:
    """The loop's ``call_later`` for the wake rounds' ``_run``, captured: the test fires or inspects it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed: list[tuple[float, asyncio.TimerHandle]] = []
        self._callbacks: list[object] = []
        call_later = loop.call_later

        def capture(delay, callback, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            handle = call_later(3600, callback, *args, **kwargs)  # (never fires by itself within a test)
            if getattr(callback, "__name__", "") == "_run":
                self.armed.append((delay, handle))
                self._callbacks.append(callback)
            return handle

        monkeypatch.setattr(loop, "call_later", capture)

    def fire(self) -> None:
        """End the round: run the last armed timer's callback now (it must not have been cancelled)."""
        _, handle = self.armed[-1]
        assert not handle.cancelled()
        handle.cancel()
        self._callbacks[-1]()  # type: ignore[operator]


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_pulls_woken_in_one_round_run_together_at_its_end(monkeypatch):
    timers = Timers(asyncio.get_running_loop(), monkeypatch)
    processor = Recorder()
    wakes = PullWakeRounds(processor.execute_requests_when_wakeup)
    prs = [Pr(), Pr(), Pr()]
    for pr in prs:
        wakes.wake(pr)
        await turns()  # (loop turns inside the round: nothing runs before its end)
    assert processor.ran == [] and wakes.waiting == 3
    assert [delay for delay, _ in timers.armed] == [WAKE_ROUND_S]  # one timer for the round, at the round's length
    timers.fire()
    assert processor.ran == prs and processor.calls == 1 and wakes.rounds == 1
    wakes.wake(prs[0])  # a pull woken after the round starts the next one
    assert len(timers.armed) == 2 and processor.calls == 1
    timers.fire()
    assert processor.ran == [*prs, prs[0]] and processor.calls == 2


async def test_a_deadline_runs_in_the_next_turn_with_the_waiting_round(monkeypatch):
    timers = Timers(asyncio.get_running_loop(), monkeypatch)
    processor = Recorder()
    wakes = PullWakeRounds(processor.execute_requests_when_wakeup)
    woken, expired, later = Pr(), Pr(), Pr()
    wakes.wake(woken)
    wakes.wake_now(expired)
    assert timers.armed[0][1].cancelled()  # the round's timer gives way to the deadline's turn
    wakes.wake(later)  # (woken in the same turn: joins the run at once)
    await turns(1)
    assert processor.ran == [woken, expired, later] and processor.calls == 1
    wakes.wake_now(expired)  # a deadline alone: the next turn, no timer
    await turns(1)
    assert processor.calls == 2 and len(timers.armed) == 1


async def test_the_shutdown_runs_what_waits_for_its_round(monkeypatch):
    timers = Timers(asyncio.get_running_loop(), monkeypatch)
    processor = Recorder()
    wakes = PullWakeRounds(processor.execute_requests_when_wakeup)
    pr = Pr()
    wakes.wake(pr)
    wakes.run_now()
    assert processor.ran == [pr] and timers.armed[0][1].cancelled()
    wakes.run_now()  # nothing waits: no run
    assert processor.calls == 1


async def test_a_round_of_zero_runs_in_the_next_turn():
    processor = Recorder()
    wakes = PullWakeRounds(processor.execute_requests_when_wakeup, round_s=0.0)
    prs = [Pr(), Pr()]
    for pr in prs:
        wakes.wake(pr)
    assert processor.ran == []  # deferred: an arrival path never re-enters a pull
    await turns(1)
    assert processor.ran == prs and processor.calls == 1


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
    wakes = PullWakeRounds(processor.execute_requests_when_wakeup)
    for pr in prs:
        wakes.wake(pr)
    wakes.run_now()
    assert ran == ["a", "b", "raise", "e"]
    assert channels[0].sent == [("answer", "a")] and channels[4].sent == [("answer", "e")]
    assert channels[2].sent == [("error", ResponseCode.SYSTEM_ERROR, "boom")]
    out = capsys.readouterr().out
    assert "woken pull not answered" in out and "woken pull failed" in out


async def test_a_busy_round_makes_the_next_one_longer_until_a_round_answers_fewer(monkeypatch):
    timers = Timers(asyncio.get_running_loop(), monkeypatch)
    processor = Counting()
    wakes = PullWakeRounds(processor.execute_requests_when_wakeup)
    per_pull = BUSY_MESSAGES_PER_PULL
    # (messages the round answers, pulls in it) → is the round after it busy?
    steps = [
        (1, 1, False),  # a lone arrival's message: the short round again
        (per_pull * 2 - 1, 2, False),  # just under the mark on average
        (per_pull * 2, 2, True),  # at it
        (30, 1, True),  # a busy round stays busy
        (per_pull - 1, 1, False),  # and a round that answers fewer ends it
        (None, 1, False),  # a processor that does not count: never busy
    ]
    expected = [WAKE_ROUND_S]
    for answered, pulls, busy in steps:
        processor.answered = answered
        for _ in range(pulls):
            wakes.wake(Pr())
        assert [delay for delay, _ in timers.armed] == expected
        timers.fire()
        assert wakes.busy is busy
        expected.append(BUSY_ROUND_S if busy else WAKE_ROUND_S)
    wakes.wake(Pr())
    assert [delay for delay, _ in timers.armed] == expected


async def test_a_deadline_is_not_delayed_by_a_busy_round(monkeypatch):
    timers = Timers(asyncio.get_running_loop(), monkeypatch)
    processor = Counting()
    wakes = PullWakeRounds(processor.execute_requests_when_wakeup)
    processor.answered = 32
    wakes.wake(Pr())
    timers.fire()
    assert wakes.busy
    woken, expired = Pr(), Pr()
    wakes.wake(woken)
    assert timers.armed[-1][0] == BUSY_ROUND_S
    wakes.wake_now(expired)
    assert timers.armed[-1][1].cancelled()
    await turns(1)
    assert processor.ran[-2:] == [woken, expired] and processor.calls == 2


async def test_rounds_of_zero_or_longer_than_a_busy_one_keep_their_length(monkeypatch):
    timers = Timers(asyncio.get_running_loop(), monkeypatch)
    processor = Counting()
    processor.answered = 32
    at_once = PullWakeRounds(processor.execute_requests_when_wakeup, round_s=0.0)
    for _ in range(3):  # (the benchmark harness's per-message cycle: never a timer, busy or not)
        at_once.wake(Pr())
        await turns(1)
    assert at_once.busy and processor.calls == 3 and timers.armed == []
    long = PullWakeRounds(processor.execute_requests_when_wakeup, round_s=60.0)
    long.wake(Pr())
    timers.fire()
    long.wake(Pr())
    assert long.busy and [delay for delay, _ in timers.armed] == [60.0, 60.0]


async def test_the_processor_counts_the_offsets_its_found_answers_advanced():
    """What decides a busy round: a found answer counts nextBeginOffset less the pull's offset (its messages, and those
    a filter skipped); not-found and error answers, a closed channel's pull and a failed write's count nothing more."""
    from broker.processor.pull_answer import PullAnswer

    processor = PullMessageProcessor.__new__(PullMessageProcessor)

    class Req:
        opaque, serialize_type = 1, 1

        def response(self, code, remark):  # noqa: ANN001, ANN202
            return ("error", code, remark)

    def process(channel, request, allow_suspend, header):  # noqa: ANN001, ANN202
        code, next_begin = header
        if code is None:
            raise ValueError("boom")
        return PullAnswer(
            request, code, "FOUND", next_begin, 0, next_begin, b"x" if code == ResponseCode.SUCCESS else None
        )

    processor._process = process  # type: ignore[method-assign]
    cases = [  # (channel, pulled from, (code, nextBeginOffset)), and what each adds
        (Channel(), 10, (ResponseCode.SUCCESS, 17), 7),
        (Channel(), 3, (ResponseCode.PULL_NOT_FOUND, 3), 0),
        (Channel(), 5, (None, 0), 0),  # its re-run raised: SYSTEM_ERROR
        (Channel(active=False), 0, (ResponseCode.SUCCESS, 40), 0),  # not run
        (Channel(fail=True), 100, (ResponseCode.SUCCESS, 132), 32),  # its answer was made; the write failed
        (Channel(), 0, (ResponseCode.PULL_OFFSET_MOVED, 50), 0),
    ]
    prs = [PullRequest(Req(), ch, "T", 0, offset, None, None, header) for ch, offset, header, _ in cases]
    assert processor.execute_requests_when_wakeup(prs) == sum(adds for *_, adds in cases)
