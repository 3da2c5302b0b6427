"""StoreFault: fault injection switches the broker's admin request can set on a running store.

- `stall_append_until_ms`: until this wall-clock time every append holds the CommitLog lock until the
  window ends (with `await asyncio.sleep`, so the loop runs and `is_os_page_cache_busy()` turns true);
- `slow_fsync_ms`: every fsync of the CommitLog first sleeps this long in its worker thread (SYNC_FLUSH
  puts then hit FLUSH_DISK_TIMEOUT when it exceeds `syncFlushTimeout`);
- `drain_pool_until_ms`: until this time the transient store pool lends nothing and reports 0 free
  buffers (`is_transient_store_pool_deficient()` is true).
A per-message stall is also available: `MessageStore.put_message(msg, stall_append_ms=N)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class StoreFault:
    now_ms: Callable[[], int]
    stall_append_until_ms: int = 0
    slow_fsync_ms: int = 0
    drain_pool_until_ms: int = 0

    def inject_stall_append(self, duration_ms: int) -> None:
        self.stall_append_until_ms = self.now_ms() + max(0, duration_ms)

    def inject_slow_fsync(self, delay_ms: int) -> None:
        self.slow_fsync_ms = max(0, delay_ms)

    def inject_drain_pool(self, duration_ms: int) -> None:
        self.drain_pool_until_ms = self.now_ms() + max(0, duration_ms)

    def clear(self) -> None:
        self.stall_append_until_ms = 0
        self.slow_fsync_ms = 0
        self.drain_pool_until_ms = 0

    def stall_append_remaining_ms(self, now: int) -> int:
        until = self.stall_append_until_ms
        if until <= 0:
            return 0
        if now >= until:
            self.stall_append_until_ms = 0  # window over: back to the fast path
            return 0
        return until - now

    def pool_drained(self) -> bool:
        until = self.drain_pool_until_ms
        if until <= 0:
            return False
        if self.now_ms() >= until:
            self.drain_pool_until_ms = 0
            return False
        return True

    def snapshot(self) -> dict[str, int]:
        return {
            "stallAppendUntilMs": self.stall_append_until_ms,
            "slowFsyncMs": self.slow_fsync_ms,
            "drainPoolUntilMs": self.drain_pool_until_ms,
        }
