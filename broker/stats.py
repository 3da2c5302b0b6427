"""BrokerStats: counters for runtime info, metrics and the once-a-second load-shedding log line.

Counters only ever increase; rates are derived by whoever reads them (metrics scrapes, runtime
info). Load shedding is summarised (at most one log line per second per queue and kind) so a broker
under pressure never logs one line per refused request.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Callable

import structlog

log = structlog.get_logger(__name__)


class BrokerStats:
    def __init__(self, *, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self.boot_ms = now_ms()
        self.put_nums: Counter[str] = Counter()
        self.put_size: Counter[str] = Counter()
        self.get_nums: Counter[tuple[str, str]] = Counter()
        self.get_size: Counter[tuple[str, str]] = Counter()
        self.send_back: Counter[str] = Counter()
        self.busy: Counter[str] = Counter()  # busy kind → responses (OVERLOAD, PCBUSY_CLEAN_QUEUE, ...)
        self.shed_by_queue: Counter[tuple[str, str]] = Counter()
        self._pending_log: defaultdict[tuple[str, str], int] = defaultdict(int)
        self._last_log_ms = 0
        self._tps_window: dict[str, tuple[int, int]] = {}

    # -- producers and consumers ---------------------------------------------------------
    def on_put(self, topic: str, msgs: int, size: int) -> None:
        self.put_nums[topic] += msgs
        self.put_size[topic] += size

    def on_get(self, group: str, topic: str, msgs: int, size: int) -> None:
        self.get_nums[(group, topic)] += msgs
        self.get_size[(group, topic)] += size

    def on_send_back(self, group: str, topic: str) -> None:
        self.send_back[group] += 1

    def consume_tps(self, group: str) -> float:
        """Messages per second pulled by ``group`` since the previous call (upstream: per minute)."""
        total = sum(n for (g, _), n in self.get_nums.items() if g == group)
        now = self._now_ms()
        prev = self._tps_window.get(group)
        self._tps_window[group] = (now, total)
        if prev is None or now <= prev[0]:
            return 0.0
        return (total - prev[1]) * 1000.0 / (now - prev[0])

    # -- flow control --------------------------------------------------------------------
    def on_busy(self, kind: str, queue: str = "send", count: int = 1) -> None:
        self.busy[kind] += count
        self.shed_by_queue[(queue, kind)] += count
        self._pending_log[(queue, kind)] += count
        now = self._now_ms()
        if now - self._last_log_ms >= 1000:
            self._last_log_ms = now
            summary = {f"{q}:{k}": n for (q, k), n in self._pending_log.items()}
            self._pending_log.clear()
            log.warning("shedding load", responses=summary, window_ms=1000)

    @property
    def total_put(self) -> int:
        return sum(self.put_nums.values())

    @property
    def total_get(self) -> int:
        return sum(self.get_nums.values())
