"""Units behind the endpoint: latency buckets, the processor wrapper, upstream's stats windows (fake clocks)."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from broker.metrics import (
    RPC_LATENCY_BUCKETS_MS,
    InstrumentedProcessor,
    RequestMetrics,
    StatsWindows,
    is_system,
)
from broker.request_metrics import FOLD_EVERY
from remoting.codes import RequestCode, ResponseCode
from remoting.command import RemotingCommand


class FakeStats:
    def __init__(self) -> None:
        self.put_nums: Counter[str] = Counter()
        self.put_size: Counter[str] = Counter()
        self.get_nums: Counter[tuple[str, str]] = Counter()
        self.get_size: Counter[tuple[str, str]] = Counter()

    @property
    def total_put(self) -> int:
        return sum(self.put_nums.values())

    @property
    def total_get(self) -> int:
        return sum(self.get_nums.values())


class Clock:
    def __init__(self, ms: int) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def local_noon_ms() -> int:
    lt = time.localtime()
    return int(time.mktime((lt.tm_year, lt.tm_mon, lt.tm_mday, 12, 0, 0, 0, 0, -1)) * 1000)


@pytest.mark.parametrize(
    "elapsed, bucket", [(0.2, 0), (1.0, 0), (1.01, 1), (3.0, 1), (99.9, 5), (3000.0, 8), (3000.1, 9), (1e9, 9)]
)
def test_latency_buckets_are_le(elapsed, bucket):
    m = RequestMetrics()
    m.observe(RequestCode.SEND_MESSAGE, ResponseCode.SUCCESS, elapsed)
    cell = m.latency[(RequestCode.SEND_MESSAGE, ResponseCode.SUCCESS, False, "success")]
    assert cell.buckets.index(1) == bucket and len(cell.buckets) == len(RPC_LATENCY_BUCKETS_MS) + 1
    assert (cell.count, cell.total_ms) == (1, elapsed)


class Inner:
    def __init__(self, answer=None, error: Exception | None = None, reject: bool = False) -> None:
        self.answer, self.error, self.reject = answer, error, reject

    def reject_request(self) -> bool:
        return self.reject

    async def process_request(self, channel, request):
        if self.error is not None:
            raise self.error
        return self.answer(request) if callable(self.answer) else self.answer


async def test_wrapper_times_answers_parks_oneways_and_failures():
    m = RequestMetrics()
    ticks = iter([0.0, 0.004, 10.0, 10.002, 20.0, 20.5, 30.0, 30.001])

    def clock():
        return next(ticks)

    ok = InstrumentedProcessor(Inner(lambda r: r.response(ResponseCode.SUCCESS)), "send", m, clock=clock)
    resp = await ok.process_request(None, RemotingCommand.request(RequestCode.SEND_MESSAGE_V2))
    assert resp.code == 0
    cell = m.latency[(RequestCode.SEND_MESSAGE_V2, ResponseCode.SUCCESS, False, "success")]
    assert cell.count == 1 and cell.total_ms == pytest.approx(4.0)
    parked = InstrumentedProcessor(Inner(None), "pull", m, clock=clock)
    assert await parked.process_request(None, RemotingCommand.request(RequestCode.PULL_MESSAGE)) is None
    assert m.latency[(RequestCode.PULL_MESSAGE, None, True, "success")].count == 1
    assert (
        await parked.process_request(None, RemotingCommand.request(RequestCode.UPDATE_CONSUMER_OFFSET, oneway=True))
        is None
    )
    assert m.latency[(RequestCode.UPDATE_CONSUMER_OFFSET, None, False, "oneway")].count == 1
    failing = InstrumentedProcessor(Inner(error=KeyError("boom")), "admin", m, clock=clock)
    with pytest.raises(KeyError):  # the executor still answers SYSTEM_ERROR: the wrapper only counts
        await failing.process_request(None, RemotingCommand.request(RequestCode.GET_ALL_TOPIC_CONFIG))
    assert (
        m.latency[(RequestCode.GET_ALL_TOPIC_CONFIG, ResponseCode.SYSTEM_ERROR, False, "process_request_failed")].count
        == 1
    )


def test_wrapper_counts_refusals_per_queue():
    m = RequestMetrics()
    assert InstrumentedProcessor(Inner(reject=True), "send", m).reject_request() is True
    assert InstrumentedProcessor(Inner(reject=False), "send", m).reject_request() is False
    # no reject_request at all (or None, the pull processor's): none offered, so the server skips the check
    assert InstrumentedProcessor(object(), "admin", m).reject_request is None
    assert InstrumentedProcessor(type("NeverRefuses", (), {"reject_request": None})(), "pull", m).reject_request is None
    assert m.rejected == Counter({"send": 1})


def test_stats_windows_minute_hour_day():
    stats, clock = FakeStats(), Clock(local_noon_ms())
    windows = StatsWindows(stats, cluster_name=lambda: "C", now_ms=clock)
    assert windows.view("TOPIC_PUT_NUMS", "t") is None  # never counted: upstream's "not exist"
    windows.tick()
    stats.put_nums["t"] += 10
    stats.get_nums[("g", "t")] += 4
    clock.ms += 5_000
    view = windows.view("TOPIC_PUT_NUMS", "t")
    assert view["statsMinute"] == {"sum": 10, "tps": pytest.approx(2.0), "avgpt": 0.0}
    assert view["statsDay"]["sum"] == 10
    assert windows.view("GROUP_GET_NUMS", "t@g")["statsHour"]["sum"] == 4
    assert windows.view("BROKER_PUT_NUMS", "C")["statsMinute"]["sum"] == 10
    # 80 s later the minute window has rolled past the first 10 messages; the hour still has them.
    for _ in range(8):
        clock.ms += 10_000
        windows.tick()
    stats.put_nums["t"] += 3
    view = windows.view("TOPIC_PUT_NUMS", "t")
    assert view["statsMinute"]["sum"] == 3
    assert view["statsHour"]["sum"] == 13 and view["statsDay"]["sum"] == 13


def test_stats_windows_day_rollover_sets_morning_totals():
    stats, clock = FakeStats(), Clock(local_noon_ms())
    windows = StatsWindows(stats, cluster_name=lambda: "C", now_ms=clock)
    windows.tick()
    stats.put_nums["t"] = 100
    stats.get_nums[("g", "t")] = 40
    clock.ms += 24 * 3_600_000  # tomorrow
    windows.tick()
    assert (windows.put_total_yesterday_morning, windows.put_total_today_morning) == (0, 100)
    assert (windows.get_total_yesterday_morning, windows.get_total_today_morning) == (0, 40)
    stats.put_nums["t"] = 150
    clock.ms += 24 * 3_600_000
    windows.tick()
    assert (windows.put_total_yesterday_morning, windows.put_total_today_morning) == (100, 150)


@pytest.mark.parametrize(
    "topic, group, expected",
    [
        ("orders", "g", False),
        ("TBW102", "", True),
        ("rmq_sys_x", "", True),
        ("%RETRY%TOOLS_CONSUMER", "", True),
        ("orders", "CID_RMQ_SYS_TRANS", True),
        ("%RETRY%g", "g", False),
    ],
)
def test_is_system_label(topic, group, expected):
    assert is_system(topic, group) is expected


def test_answered_times_folded_in_batches_give_the_cells_observe_gives_one_by_one():
    """observe_answer keeps the times and folds them (every FOLD_EVERY, and whenever the cells are read): the
    buckets, count and sum are those of observe, one call per request."""
    batched, one_by_one = RequestMetrics(), RequestMetrics()
    times = [(i % 13) * 0.9 + (i % 7) * 150.0 for i in range(FOLD_EVERY * 2 + 37)]
    for i, elapsed in enumerate(times):
        code = RequestCode.PULL_MESSAGE if i % 3 else RequestCode.SEND_MESSAGE_V2
        answer = ResponseCode.SUCCESS if i % 5 else ResponseCode.PULL_NOT_FOUND
        batched.observe_answer(code, answer, elapsed)
        one_by_one.observe(code, answer, elapsed)
        if i == FOLD_EVERY + 3:  # a read in the middle folds what is kept so far
            assert batched.latency.keys() == one_by_one.latency.keys()
    got, expected = batched.latency, one_by_one.latency
    assert got.keys() == expected.keys()
    for key, cell in expected.items():
        assert (got[key].buckets, got[key].count) == (cell.buckets, cell.count)
        assert got[key].total_ms == pytest.approx(cell.total_ms)


def test_a_fold_puts_each_time_in_the_bucket_observe_puts_it_in_bounds_included():
    """The fold counts a sorted batch by one bisect per bound: against ``observe`` one by one over seeded random
    batches of times on, just below and just above every bound, zero, negative and huge times, in random order
    (fails if a time equal to a bound went to the next bucket, as a bisect_left over the times would put it)."""
    import math
    import random

    from broker.request_metrics import RPC_LATENCY_BUCKETS_MS

    rng = random.Random(15)
    near = [0.0, -1.0, 1e9]
    for bound in RPC_LATENCY_BUCKETS_MS:
        near += [bound, math.nextafter(bound, 0.0), math.nextafter(bound, math.inf)]
    for _ in range(60):
        batched, one_by_one = RequestMetrics(), RequestMetrics()
        times = [rng.choice(near) if rng.random() < 0.5 else rng.uniform(0, 4000) for _ in range(rng.randrange(1, 600))]
        for elapsed in times:
            batched.observe_answer(RequestCode.SEND_MESSAGE_V2, ResponseCode.SUCCESS, elapsed)
            one_by_one.observe(RequestCode.SEND_MESSAGE_V2, ResponseCode.SUCCESS, elapsed)
        got, expected = batched.latency, one_by_one.latency
        assert got.keys() == expected.keys()
        for key, cell in expected.items():
            assert (got[key].buckets, got[key].count) == (cell.buckets, cell.count)
            assert got[key].total_ms == pytest.approx(cell.total_ms)


def test_the_synchronous_entry_counts_answers_as_observe_does_across_folds():
    """``process_request_now`` appends an answer's time to its list itself (``observe_answer`` inlined) until the
    list is due for folding: over several folds, reads in between and two kinds of answer, the cells are those
    of ``observe``, one call per request, and no list ever holds FOLD_EVERY times."""
    m, expected = RequestMetrics(), RequestMetrics()
    now = [0.0]

    def clock():
        return now[0]

    class NowInner(Inner):
        def process_request_now(self, channel, request):
            now[0] += (request.opaque % 11) * 0.0007 + (request.opaque % 5) * 0.2  # its time, in seconds
            code = ResponseCode.SUCCESS if request.opaque % 4 else ResponseCode.PULL_NOT_FOUND
            return request.response(code)

    wrapper = InstrumentedProcessor(NowInner(), "pull", m, clock=clock)
    for i in range(FOLD_EVERY * 3 + 19):
        before = now[0]
        answer = wrapper.process_request_now(None, RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque=i))
        expected.observe(RequestCode.PULL_MESSAGE, answer.code, (now[0] - before) * 1000.0)
        assert all(len(times) < FOLD_EVERY for times in m._answered.values())
        if i in (3, FOLD_EVERY + 1):
            assert m.latency.keys() == expected.latency.keys()
    got, want = m.latency, expected.latency
    assert got.keys() == want.keys()
    for key, cell in want.items():
        assert (got[key].buckets, got[key].count) == (cell.buckets, cell.count)
        assert got[key].total_ms == pytest.approx(cell.total_ms)
