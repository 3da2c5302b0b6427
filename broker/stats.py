"""BrokerStats: counters for runtime info, metrics and the once-a-second load-shedding log line.

Counters only ever increase; rates are derived by whoever reads them (metrics scrapes, runtime
info). Load shedding — the five busy answers ``OVERLOAD``, ``REJECTREQUEST``, ``PCBUSY_CLEAN_QUEUE``,
``TIMEOUT_CLEAN_QUEUE``, ``PC_SYNCHRONIZED`` — is counted per kind and per queue where it happens and
summarised by ``run_shed_reporter``: at most one log line per interval, and only for an interval in
which something was shed, so a broker under pressure never logs one line per refused request and the
last second of an incident is still reported.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import structlog

log = structlog.get_logger(__name__)

#: The busy answers, by the tag at the front of their remark (protocol.md §7).
BUSY_KINDS = ("OVERLOAD", "REJECTREQUEST", "PCBUSY_CLEAN_QUEUE", "TIMEOUT_CLEAN_QUEUE", "PC_SYNCHRONIZED")


class BrokerStats:
    def __init__(self, *, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self.boot_ms = now_ms()
        self.put_nums: Counter[str] = Counter()
        self.put_size: Counter[str] = Counter()
        self.get_nums: Counter[tuple[str, str]] = Counter()
        self.get_size: Counter[tuple[str, str]] = Counter()
        self.send_back: Counter[str] = Counter()
        # busy kind → responses; every kind present (0 until it happens) so runtime info always lists all five
        self.busy: Counter[str] = Counter(dict.fromkeys(BUSY_KINDS, 0))
        self.shed_by_queue: Counter[tuple[str, str]] = Counter()  # (queue, kind) → responses
        self._pending: Counter[tuple[str, str]] = Counter()  # shed since the last summary line
        self._rejected_seen: dict[str, int] = {}  # executor name → its ``rejected`` already counted
        self._last_flush_ms = self.boot_ms
        self._tps_window: dict[str, tuple[int, int]] = {}

    # -- producers and consumers ---------------------------------------------------------
    def on_put(self, topic: str, msgs: int, size: int) -> None:
        self.put_nums[topic] += msgs
        self.put_size[topic] += size

    def on_get(self, group: str, topic: str, msgs: int, size: int) -> None:
        key = (group, topic)  # (one tuple: every pull that finds messages counts here)
        self.get_nums[key] += msgs
        self.get_size[key] += size

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
        """``count`` requests of ``queue`` were answered with busy answer ``kind``. Never logs by itself."""
        self.busy[kind] += count
        self.shed_by_queue[(queue, kind)] += count
        self._pending[(queue, kind)] += count

    def observe_overload(self, executors: Mapping[str, Any]) -> None:
        """Fold each executor's full-queue refusals (its ``rejected`` counter, answered ``[OVERLOAD]`` by
        the remoting layer, which knows nothing of these stats) into the OVERLOAD counts."""
        seen = self._rejected_seen
        for name, executor in executors.items():
            delta = executor.rejected - seen.get(name, 0)
            if delta > 0:
                seen[name] = executor.rejected
                self.on_busy("OVERLOAD", name, delta)

    def flush_shed_log(self, queue_sizes: Mapping[str, int] | None = None) -> dict[str, int] | None:
        """Log one summary line for what was shed since the previous flush; None (no line) if nothing."""
        if not self._pending:
            return None
        now = self._now_ms()
        summary = {f"{q}:{k}": n for (q, k), n in sorted(self._pending.items())}
        self._pending.clear()
        window, self._last_flush_ms = now - self._last_flush_ms, now
        fields: dict[str, Any] = {"responses": summary, "total": sum(summary.values()), "window_ms": window}
        if queue_sizes:
            fields["queue_sizes"] = dict(queue_sizes)
        log.warning("shedding load", **fields)
        return summary

    async def run_shed_reporter(self, executors: Callable[[], Mapping[str, Any]], interval_s: float = 1.0) -> None:
        """Every ``interval_s``: pick up OVERLOAD counts and write the summary line if anything was shed."""
        while True:
            await asyncio.sleep(interval_s)
            try:
                table = executors()
                self.observe_overload(table)
                self.flush_shed_log({name: e.size for name, e in table.items() if e.size})
            except Exception:
                log.exception("load shedding report failed")

    @property
    def total_put(self) -> int:
        return sum(self.put_nums.values())

    @property
    def total_get(self) -> int:
        return sum(self.get_nums.values())
