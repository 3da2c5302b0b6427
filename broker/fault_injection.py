"""Fault injection: reproduce broker-busy incidents on purpose (only with ``faultInjectionEnable=true``).

Broker side, ``FaultInjector`` serves the FAULT_INJECT (5001) admin request. Kinds, each for ``durationMs``:
- ``stall_queue`` (``target`` = a queue name: send, pull, query, client_manage, heartbeat,
  consumer_manage, end_transaction, admin; default send) and its alias ``stall_send_workers``: the
  queue's workers take no request, so queued requests age into ``[TIMEOUT_CLEAN_QUEUE]`` and a full
  queue answers ``[OVERLOAD]``;
- ``stall_append``: appends hold the commit-log lock until the window ends, so the page cache reads
  busy after ``osPageCacheBusyTimeOutMills`` (``[PCBUSY_CLEAN_QUEUE]``, ``[REJECTREQUEST]``,
  ``[PC_SYNCHRONIZED]``);
- ``drain_transient_pool``: the transient store pool reports no free buffer (``[REJECTREQUEST]``);
  needs ``transientStorePoolEnable=true``;
- ``slow_fsync``: every commit-log fsync first sleeps ``value`` ms (default 100); SYNC_FLUSH sends then
  answer FLUSH_DISK_TIMEOUT;
- ``clear``: end every active fault now.
The per-message switches are the user properties ``brokerSleepMs`` / ``brokerStallAppendMs`` (read by
the send processor). With injection off, FAULT_INJECT is answered NO_PERMISSION by the admin processor.

The client side (the one FAULT_INJECT request every tool sends) is ``mqclient.fault``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import structlog

log = structlog.get_logger(__name__)

KINDS = ("stall_send_workers", "stall_queue", "stall_append", "drain_transient_pool", "slow_fsync", "clear")
DEFAULT_SLOW_FSYNC_MS = 100
MAX_DURATION_MS = 3_600_000  # an hour: longer is a typo, not an experiment


class FaultInjector:
    """Applies FAULT_INJECT requests to the broker's executors and store; remembers what is active."""

    def __init__(self, *, executors: Callable[[], Mapping[str, Any]], store: Any, now_ms: Callable[[], int]) -> None:
        self._executors = executors
        self._store = store
        self._now_ms = now_ms
        self.active: dict[str, int] = {}  # "kind" or "stall_queue:<target>" → until (wall ms)
        self._fsync_timer: asyncio.TimerHandle | None = None

    def inject(self, kind: str, target: str | None, duration_ms: int, value: str | None) -> None:
        """Arm one fault; ValueError (its text is the answer's remark) for anything malformed."""
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {', '.join(KINDS)}")
        if kind == "clear":
            self.clear()
            return
        if duration_ms <= 0:
            raise ValueError(f"durationMs must be a positive number of milliseconds, got {duration_ms}")
        if duration_ms > MAX_DURATION_MS:
            raise ValueError(f"durationMs {duration_ms} is over the limit of {MAX_DURATION_MS} ms")
        fault = self._store.fault
        key = kind
        if kind in ("stall_send_workers", "stall_queue"):
            name = target or "send"
            executors = self._executors()
            executor = executors.get(name)
            if executor is None:
                raise ValueError(f"unknown queue {name!r}; expected one of {', '.join(sorted(executors))}")
            executor.pause(duration_ms / 1000)
            key = f"stall_queue:{name}"
        elif kind == "stall_append":
            fault.inject_stall_append(duration_ms)
        elif kind == "drain_transient_pool":
            if getattr(self._store, "pool", None) is None:
                raise ValueError(
                    "drain_transient_pool needs a transient store pool: start the broker with "
                    "transientStorePoolEnable=true (ASYNC_FLUSH master)"
                )
            fault.inject_drain_pool(duration_ms)
        elif kind == "slow_fsync":
            delay_ms = _parse_ms(value, DEFAULT_SLOW_FSYNC_MS, "slow_fsync value (ms per fsync)")
            fault.inject_slow_fsync(delay_ms)
            if self._fsync_timer is not None:  # a newer window replaces the older one's end
                self._fsync_timer.cancel()
            self._fsync_timer = asyncio.get_running_loop().call_later(duration_ms / 1000, self._end_slow_fsync)
        self.active[key] = self._now_ms() + duration_ms
        log.warning("fault injected", kind=kind, target=target, duration_ms=duration_ms, value=value)

    def _end_slow_fsync(self) -> None:
        self._fsync_timer = None
        self._store.fault.inject_slow_fsync(0)

    def clear(self) -> None:
        self.active.clear()
        self._store.fault.clear()
        if self._fsync_timer is not None:
            self._fsync_timer.cancel()
            self._fsync_timer = None
        for executor in self._executors().values():
            executor.resume()
        log.warning("faults cleared")

    def active_faults(self) -> dict[str, int]:
        """Faults still in their window → remaining ms (expired ones are dropped)."""
        now = self._now_ms()
        for key in [k for k, until in self.active.items() if until <= now]:
            del self.active[key]
        return {k: until - now for k, until in self.active.items()}


def _parse_ms(value: str | None, default: int, what: str) -> int:
    if value is None or value == "":
        return default
    try:
        ms = int(value)
    except ValueError:
        raise ValueError(f"{what} must be an integer, got {value!r}") from None
    if ms < 0:
        raise ValueError(f"{what} must not be negative, got {ms}")
    return ms
