"""StoreStats: counters and rates behind `MessageStore.runtime_info()` (upstream StoreStatsService names)."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from store.periodic import Periodic


class StoreStats:
    def __init__(self, now_ms: Callable[[], int]) -> None:
        self.now_ms = now_ms
        self.boot_timestamp = now_ms()
        self.put_failed = 0
        self.put_entire_time_max = 0
        self.get_found = 0
        self.get_miss = 0
        self.get_transferred = 0
        self.get_entire_time_max = 0
        self.put_count = 0
        # (ms, puts, found, miss, transferred) samples, one a second, ten minutes
        self._samples: deque[tuple[int, int, int, int, int]] = deque(maxlen=601)
        self._sampler = Periodic("store-stats", self.sample, lambda: 1.0)

    def put_done(self, elapsed_ms: int) -> None:
        self.put_count += 1
        self.put_entire_time_max = max(self.put_entire_time_max, elapsed_ms)

    def put_done_many(self, puts: int, elapsed_ms: int) -> None:
        """`put_done` for the puts of one group, all of which took `elapsed_ms`."""
        self.put_count += puts
        if elapsed_ms > self.put_entire_time_max:
            self.put_entire_time_max = elapsed_ms

    def get_time(self, elapsed_ms: int) -> None:
        self.get_entire_time_max = max(self.get_entire_time_max, elapsed_ms)

    def sample(self) -> None:
        self._samples.append((self.now_ms(), self.put_count, self.get_found, self.get_miss, self.get_transferred))

    def start(self) -> None:
        if not self._sampler.running:
            self.sample()  # the first sample: rates are measured from the start
        self._sampler.start()

    async def stop(self) -> None:
        await self._sampler.stop()

    def _tps(self, field: int, window_s: int) -> float:
        if len(self._samples) < 2:
            return 0.0
        last = self._samples[-1]
        first = self._samples[max(0, len(self._samples) - 1 - window_s)]
        span = (last[0] - first[0]) / 1000
        return (last[field] - first[field]) / span if span > 0 else 0.0

    def _tps_string(self, field: int) -> str:
        return " ".join(f"{self._tps(field, w):.2f}" for w in (10, 60, 600))

    def runtime_info(self) -> dict[str, str]:
        runtime_s = max(0, (self.now_ms() - self.boot_timestamp) // 1000)
        days, rem = divmod(runtime_s, 86400)
        hours, rem = divmod(rem, 3600)
        minutes, seconds = divmod(rem, 60)
        return {
            "bootTimestamp": str(self.boot_timestamp),
            "runtime": f"[ {days} days, {hours} hours, {minutes} minutes, {seconds} seconds ]",
            "putMessageEntireTimeMax": str(self.put_entire_time_max),
            "putMessageFailedTimes": str(self.put_failed),
            "getMessageEntireTimeMax": str(self.get_entire_time_max),
            "getMessageTimesTotalFound": str(self.get_found),
            "getMessageTimesTotalMiss": str(self.get_miss),
            "getMessageTransferedMsgCount": str(self.get_transferred),
            "putTps": self._tps_string(1),
            "getFoundTps": self._tps_string(2),
            "getMissTps": self._tps_string(3),
            "getTransferedTps": self._tps_string(4),
        }
