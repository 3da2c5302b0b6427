"""BrokerStats' flow-control counters and the load-shedding summary line (at most one per interval)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import structlog

from broker.stats import BUSY_KINDS, BrokerStats


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@dataclass
class FakeExecutor:
    rejected: int = 0
    size: int = 0


def test_every_busy_kind_is_listed_from_the_start():
    stats = BrokerStats(now_ms=Clock())
    assert dict(stats.busy) == dict.fromkeys(BUSY_KINDS, 0)
    assert set(BUSY_KINDS) == {
        "OVERLOAD",
        "REJECTREQUEST",
        "PCBUSY_CLEAN_QUEUE",
        "TIMEOUT_CLEAN_QUEUE",
        "PC_SYNCHRONIZED",
    }


def test_on_busy_counts_per_kind_and_queue_and_never_logs_by_itself():
    stats = BrokerStats(now_ms=Clock())
    with structlog.testing.capture_logs() as logs:
        for _ in range(1000):
            stats.on_busy("REJECTREQUEST")
        stats.on_busy("TIMEOUT_CLEAN_QUEUE", "pull", 7)
    assert logs == []
    assert stats.busy["REJECTREQUEST"] == 1000 and stats.busy["TIMEOUT_CLEAN_QUEUE"] == 7
    assert stats.shed_by_queue[("send", "REJECTREQUEST")] == 1000
    assert stats.shed_by_queue[("pull", "TIMEOUT_CLEAN_QUEUE")] == 7


def test_summary_line_covers_the_window_then_resets():
    clock = Clock()
    stats = BrokerStats(now_ms=clock)
    with structlog.testing.capture_logs() as logs:
        assert stats.flush_shed_log() is None  # nothing shed: no line
        stats.on_busy("PCBUSY_CLEAN_QUEUE", "send", 3)
        stats.on_busy("TIMEOUT_CLEAN_QUEUE", "heartbeat", 2)
        clock.now += 1000
        assert stats.flush_shed_log({"send": 4}) == {"heartbeat:TIMEOUT_CLEAN_QUEUE": 2, "send:PCBUSY_CLEAN_QUEUE": 3}
        assert stats.flush_shed_log() is None
    assert len(logs) == 1
    line = logs[0]
    assert line["event"] == "shedding load" and line["log_level"] == "warning"
    assert line["total"] == 5 and line["window_ms"] == 1000 and line["queue_sizes"] == {"send": 4}


def test_overload_is_folded_in_from_executor_counters_once():
    stats = BrokerStats(now_ms=Clock())
    send, pull = FakeExecutor(rejected=3), FakeExecutor()
    table = {"send": send, "pull": pull}
    stats.observe_overload(table)
    stats.observe_overload(table)  # nothing new
    assert stats.busy["OVERLOAD"] == 3 and stats.shed_by_queue[("send", "OVERLOAD")] == 3
    send.rejected, pull.rejected = 5, 1
    stats.observe_overload(table)
    assert stats.busy["OVERLOAD"] == 6
    assert stats.shed_by_queue[("send", "OVERLOAD")] == 5 and stats.shed_by_queue[("pull", "OVERLOAD")] == 1


async def test_reporter_writes_one_line_per_interval_while_shedding_and_reports_the_last_window():
    stats = BrokerStats(now_ms=Clock())
    send = FakeExecutor()
    with structlog.testing.capture_logs() as logs:
        reporter = asyncio.create_task(stats.run_shed_reporter(lambda: {"send": send}, interval_s=0.05))
        try:
            for _ in range(20):  # 0.2 s of shedding: ~4 intervals, 200 refusals + 20 overloads
                for _ in range(10):
                    stats.on_busy("REJECTREQUEST")
                send.rejected += 1
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.12)  # shedding stopped: the last window is written, then silence
            quiet_from = len(logs)
            await asyncio.sleep(0.15)
        finally:
            reporter.cancel()
            await asyncio.gather(reporter, return_exceptions=True)
    lines = [e for e in logs if e["event"] == "shedding load"]
    assert len(logs) == quiet_from == len(lines)
    assert 2 <= len(lines) <= 7, lines
    assert sum(e["total"] for e in lines) == 220
    assert sum(e["responses"].get("send:OVERLOAD", 0) for e in lines) == 20
