"""FaultInjector: reproduce broker-busy incidents on purpose (only with ``faultInjectionEnable=true``).

Kinds, each for ``durationMs``:
- ``stall_send_workers`` / ``stall_queue`` (target = executor name, default ``send``): the queue's
  workers stop taking requests, so queued requests age into ``[TIMEOUT_CLEAN_QUEUE]``;
- ``stall_append``: appends hold the commit-log lock until the window ends,
  so the page cache reads busy (``[PCBUSY_CLEAN_QUEUE]``, ``[REJECTREQUEST]``, ``[PC_SYNCHRONIZED]``);
- ``drain_transient_pool``: the transient store pool reports no free buffer (``[REJECTREQUEST]``);
- ``slow_fsync``: for the duration, every fsync sleeps ``value`` ms (default 100) first (SYNC_FLUSH sends time out: FLUSH_DISK_TIMEOUT);
- ``clear``: end every active fault.
"""

from __future__ import annotations

import asyncio
from typing import Callable

import structlog

log = structlog.get_logger(__name__)

KINDS = ("stall_send_workers", "stall_queue", "stall_append", "drain_transient_pool", "slow_fsync", "clear")


class FaultInjector:
    def __init__(self, *, executors: Callable[[], dict], store, now_ms: Callable[[], int]) -> None:
        self._executors = executors
        self._store = store
        self._now_ms = now_ms
        self.active: dict[str, int] = {}  # kind → until (wall ms)

    def inject(self, kind: str, target: str | None, duration_ms: int, value: str | None) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {', '.join(KINDS)}")
        if kind != "clear" and duration_ms <= 0:
            raise ValueError("durationMs must be a positive number of milliseconds")
        log.warning("fault injected", kind=kind, target=target, duration_ms=duration_ms, value=value)
        fault = self._store.fault
        if kind == "clear":
            self.active.clear()
            fault.clear()
            for executor in self._executors().values():
                executor.resume()
            return
        if kind in ("stall_send_workers", "stall_queue"):
            name = target or "send"
            executor = self._executors().get(name)
            if executor is None:
                raise ValueError(f"unknown queue {name!r}; expected one of {', '.join(sorted(self._executors()))}")
            executor.pause(duration_ms / 1000)
        elif kind == "stall_append":
            fault.inject_stall_append(duration_ms)
        elif kind == "drain_transient_pool":
            fault.inject_drain_pool(duration_ms)
        elif kind == "slow_fsync":
            fault.inject_slow_fsync(int(value) if value else 100)
            asyncio.get_running_loop().call_later(duration_ms / 1000, fault.inject_slow_fsync, 0)
        self.active[kind] = self._now_ms() + duration_ms

