"""A diagnostic: log where the event loop was when it stopped turning for longer than a threshold (issue 15, p99).

A tail of 50-470 ms send latencies is a loop that did not run its callbacks for that long. ``LoopStallMonitor``
finds out why from inside the process: the loop stamps a timestamp every ``tick_ms``; a watchdog thread looks at
that stamp and, once it is older than ``threshold_ms``, samples the loop thread's Python stack every few ms until
the loop ticks again, then logs one warning with the gap, the stacks seen most (a C call holding the GIL shows as
the Python line that made it, seen after it returns) and what the garbage collector did during the gap (its
callbacks time every collection). The loop thread's run delay (its ``schedstat``: time runnable but off a CPU)
between the two ticks around the gap (both read on the loop thread) tells a machine that did not schedule us (run delay = gap) from a loop
that was busy or waiting for the GIL (a thread waiting for the GIL sleeps: no run delay).

Off by default; ``MQ_LOOP_STALL_MS=50`` in the broker's environment turns it on (``broker.main``). Costs one
callback per tick on the loop and one thread waking every ``tick_ms``: a tool, not a feature.
"""

from __future__ import annotations

import asyncio
import collections
import gc
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger("broker.loop_stall")


def _run_delay_ns(fd: int) -> int:
    """The thread's total time runnable but not running (ns), from its open ``schedstat``; 0 if unreadable."""
    try:
        return int(os.pread(fd, 128, 0).split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _own_frames(lines: list[str]) -> list[str]:
    """What to read of one stack: the innermost frame of this repository's code (which call of ours) and the last
    three frames (what it was doing: an import, a syscall's Python line)."""
    ours = [line for line in lines if any(f"/{pkg}/" in line for pkg in ("broker", "store", "remoting", "proxy"))]
    inner = lines[-3:]
    return ([ours[-1]] if ours and ours[-1] not in inner else []) + inner


@dataclass
class _GcWatch:
    """Collections seen by ``gc.callbacks``: (generation, start, duration) of the finished ones."""

    started: float = 0.0
    done: collections.deque = field(default_factory=lambda: collections.deque(maxlen=256))

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        else:
            self.done.append((info.get("generation"), self.started, time.perf_counter() - self.started))


@dataclass
class LoopStallMonitor:
    """Watches one running loop; ``start`` from a coroutine on it, ``stop`` before it closes."""

    threshold_ms: float = 50.0
    tick_ms: float = 1.0
    sample_ms: float = 2.0
    #: (perf_counter, run delay ns) at the loop's last tick, both read on the loop thread, replaced as one object
    _stamp: tuple[float, int, int] = (0.0, 0, 0)  # (when, ns on a CPU, ns runnable off a CPU)
    _schedstat_fd: int = -1
    _stop: threading.Event = field(default_factory=threading.Event)
    _gc: _GcWatch = field(default_factory=_GcWatch)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _loop_thread_id: int = 0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread_id = threading.get_ident()
        try:
            self._schedstat_fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)  # this thread: the loop's
        except OSError:
            self._schedstat_fd = -1
        self._tick_stamp()
        gc.callbacks.append(self._gc)
        self._loop.call_soon(self._tick)
        self._thread = threading.Thread(target=self._watch, name="loop-stall", daemon=True)
        self._thread.start()
        log.info("loop stall monitor on", threshold_ms=self.threshold_ms)

    def stop(self) -> None:
        self._stop.set()
        if self._gc in gc.callbacks:
            gc.callbacks.remove(self._gc)
        if self._schedstat_fd >= 0:
            os.close(self._schedstat_fd)
            self._schedstat_fd = -1

    def _tick_stamp(self) -> None:
        # on a CPU: the thread's CPU clock (exact for the running thread; schedstat's first field lags until the
        # scheduler next accounts it, up to a tick, and would call part of a busy gap asleep)
        delay = _run_delay_ns(self._schedstat_fd) if self._schedstat_fd >= 0 else 0
        self._stamp = (time.perf_counter(), time.thread_time_ns(), delay)

    def _tick(self) -> None:
        self._tick_stamp()
        if not self._stop.is_set():
            self._loop.call_later(self.tick_ms / 1000, self._tick)

    def _watch(self) -> None:
        threshold = self.threshold_ms / 1000
        while not self._stop.wait(self.tick_ms / 1000):
            stamp = self._stamp
            if time.perf_counter() - stamp[0] < threshold:
                continue
            stacks: collections.Counter[str] = collections.Counter()
            while self._stamp is stamp and not self._stop.is_set():
                frame = sys._current_frames().get(self._loop_thread_id)
                if frame is not None:
                    stacks["".join(_own_frames(traceback.format_stack(frame)))] += 1
                time.sleep(self.sample_ms / 1000)
            end = self._stamp
            gap = end[0] - stamp[0]
            collections_in_gap = [(g, round(d * 1000, 1)) for g, s, d in self._gc.done if s >= stamp[0]]
            log.warning(
                "event loop stalled",
                gap_ms=round(gap * 1000, 1),
                run_delay_ms=round((end[2] - stamp[2]) / 1e6, 1),  # of the gap, runnable but off a CPU
                # of the gap, on a CPU: the rest of it (gap - run delay - on CPU) the loop thread slept: waiting
                # for the GIL, in a blocking call, or for I/O with its tick late
                on_cpu_ms=round((end[1] - stamp[1]) / 1e6, 1),
                gc=collections_in_gap,
                samples=sum(stacks.values()),
                stacks=[f"{n}x\n{s}" for s, n in stacks.most_common(3)],
            )
