"""Upstream's minute / hour / day stats windows over ``BrokerStats`` (its StatsItem sampling), read by
VIEW_BROKER_STATS_DATA (315) and the runtime info's ``msgPutTotalTodayMorning`` family."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True, slots=True)
class _Snapshot:
    at_ms: int
    values: dict[str, dict[str, int]]


class StatsWindows:
    """Periodic snapshots of BrokerStats, read like upstream's StatsItem (VIEW_BROKER_STATS_DATA).

    Upstream samples every 10 s for the minute view (7 samples), every 10 min for the hour view and
    every hour for the day view; a view's sum is the newest value minus the oldest sample in it, its
    tps that sum over the time between them. We use the live value as the newest one, so a message is
    visible at once instead of after the next sample.
    """

    WINDOWS: ClassVar[dict[str, tuple[int, int]]] = {
        "minute": (10_000, 7),
        "hour": (600_000, 7),
        "day": (3_600_000, 25),
    }

    def __init__(self, stats: Any, *, cluster_name: Callable[[], str], now_ms: Callable[[], int]) -> None:
        self._stats = stats
        self._cluster_name = cluster_name
        self._now_ms = now_ms
        self._windows: dict[str, deque[_Snapshot]] = {
            name: deque(maxlen=keep) for name, (_, keep) in self.WINDOWS.items()
        }
        # msgPut/GetTotal{Yesterday,Today}Morning of the runtime info: totals at the last two midnights.
        self.put_total_yesterday_morning = 0
        self.put_total_today_morning = 0
        self.get_total_yesterday_morning = 0
        self.get_total_today_morning = 0
        self._day: tuple[int, int] | None = None

    def current(self) -> dict[str, dict[str, int]]:
        s, cluster = self._stats, self._cluster_name()
        return {
            "TOPIC_PUT_NUMS": dict(s.put_nums),
            "TOPIC_PUT_SIZE": dict(s.put_size),
            "GROUP_GET_NUMS": {f"{topic}@{group}": n for (group, topic), n in s.get_nums.items()},
            "GROUP_GET_SIZE": {f"{topic}@{group}": n for (group, topic), n in s.get_size.items()},
            "BROKER_PUT_NUMS": {cluster: s.total_put},
            "BROKER_GET_NUMS": {cluster: s.total_get},
        }

    def tick(self) -> None:
        """Take the snapshots that are due (call about once a second)."""
        now = self._now_ms()
        snapshot: _Snapshot | None = None
        for name, (period, _) in self.WINDOWS.items():
            window = self._windows[name]
            if not window or now - window[-1].at_ms >= period:
                snapshot = snapshot or _Snapshot(now, self.current())
                window.append(snapshot)
        lt = time.localtime(now / 1000)
        day = (lt.tm_year, lt.tm_yday)
        if self._day is None:
            self._day = day
        elif day != self._day:
            self._day = day
            self.put_total_yesterday_morning = self.put_total_today_morning
            self.get_total_yesterday_morning = self.get_total_today_morning
            self.put_total_today_morning = self._stats.total_put
            self.get_total_today_morning = self._stats.total_get

    def view(self, stats_name: str, stats_key: str) -> dict[str, dict[str, float | int]] | None:
        """BrokerStatsData as upstream encodes it, or None when the item was never counted."""
        live = self.current().get(stats_name, {})
        if stats_key not in live:
            return None
        now, value = self._now_ms(), live[stats_key]
        out: dict[str, dict[str, float | int]] = {}
        for name, key in (("minute", "statsMinute"), ("hour", "statsHour"), ("day", "statsDay")):
            window = self._windows[name]
            first = window[0] if window else None
            base = first.values.get(stats_name, {}).get(stats_key, 0) if first else 0
            total = value - base
            span_ms = now - first.at_ms if first else 0
            tps = total * 1000.0 / span_ms if span_ms > 0 else 0.0
            # avgpt is value per call upstream; BrokerStats keeps no call counts, so it stays 0.
            out[key] = {"avgpt": 0.0, "sum": total, "tps": tps}
        return out
