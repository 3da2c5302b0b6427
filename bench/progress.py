"""Live progress on the driver: a UDP collector the load workers report to, and a one-line printer.

Workers send their cumulative counters four times a second (``bench.worker.ProgressReporter``); the
collector keeps the last few reports per worker and prints totals and rates every ``interval_s``.
Datagrams are best effort: a lost one only delays the numbers a little.

Totals are taken at one instant for all workers (``consistent_cut``): summing each worker's newest report
would add a consumer's count of now to a producer's count of up to a report period ago, and show more
messages consumed than sent.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO


@dataclass
class ProgressSnapshot:
    sent: int = 0
    acked: int = 0
    failed: int = 0
    consumed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    phases: dict[str, int] = field(default_factory=dict)
    workers: int = 0


def merge(reports: dict[int, dict[str, Any]]) -> ProgressSnapshot:
    snap = ProgressSnapshot(workers=len(reports))
    for r in reports.values():
        snap.sent += int(r.get("sent", 0))
        snap.acked += int(r.get("acked", 0))
        snap.failed += int(r.get("failed", 0))
        snap.consumed += int(r.get("consumed", 0))
        for k, v in (r.get("errors") or {}).items():
            snap.errors[k] = snap.errors.get(k, 0) + int(v)
        phase = str(r.get("phase", "?"))
        snap.phases[phase] = snap.phases.get(phase, 0) + 1
    return snap


HISTORY = 16  # reports kept per worker: a few seconds at four a second


def consistent_cut(history: dict[int, list[dict[str, Any]]]) -> dict[int, dict[str, Any]]:
    """Each worker's counters around one instant T, the newest time every running worker has reported.

    Send-side counters come from each worker's first report at or after T and ``consumed`` from its last
    report at or before T: the line may be a report period behind on consumption, but it never shows more
    consumed than sent, which no single instant can have. A finished worker (phase ``done``) is not
    waited for.
    """
    live = [h for h in history.values() if h and h[-1].get("phase") != "done"]
    if not live:
        return {w: h[-1] for w, h in history.items() if h}
    cut_t = min(int(h[-1].get("t", 0)) for h in live)
    out: dict[int, dict[str, Any]] = {}
    for worker, reports in history.items():
        if not reports:
            continue
        after = next((r for r in reports if int(r.get("t", 0)) >= cut_t), reports[-1])
        before = [r for r in reports if int(r.get("t", 0)) <= cut_t]
        # none that old: its first report is the nearest (at most one report period later)
        consumed_at = before[-1] if before else reports[0]
        out[worker] = {**after, "consumed": int(consumed_at.get("consumed", 0))}
    return out


def format_line(elapsed_s: float, snap: ProgressSnapshot, prev: ProgressSnapshot | None, dt: float) -> str:
    rate = (snap.acked - prev.acked) / dt if prev is not None and dt > 0 else 0.0
    crate = (snap.consumed - prev.consumed) / dt if prev is not None and dt > 0 else 0.0
    phases = ",".join(f"{k}:{v}" for k, v in sorted(snap.phases.items())) or "scheduling"
    errs = " ".join(f"{k}={v}" for k, v in sorted(snap.errors.items(), key=lambda kv: -kv[1])[:4])
    return (
        f"[{elapsed_s:6.1f}s] {phases:<14} sent={snap.sent} acked={snap.acked} failed={snap.failed} "
        f"consumed={snap.consumed} pub={rate:,.0f}/s con={crate:,.0f}/s" + (f" errors: {errs}" if errs else "")
    )


class ProgressCollector:
    """Listen for worker reports on ``host`` (an ephemeral UDP port) and print a line periodically."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        *,
        interval_s: float = 2.0,
        out: TextIO | None = None,
        clock: Callable[[], float] = time.monotonic,
        enabled: bool = True,
    ) -> None:
        self.interval_s = interval_s
        self.out = out or sys.stderr
        self.clock = clock
        self.enabled = enabled
        self.reports: dict[int, dict[str, Any]] = {}
        self.history: dict[int, deque[dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind((host, 0))
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.lines: list[str] = []

    @property
    def addr(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"{host}:{port}"

    def start(self) -> ProgressCollector:
        self._thread = threading.Thread(target=self._run, daemon=True, name="mqbench-progress")
        self._thread.start()
        return self

    def _receive(self) -> None:
        try:
            data, _ = self._sock.recvfrom(65536)
        except (TimeoutError, OSError):
            return
        try:
            msg = json.loads(data)
            worker = int(msg["w"])
        except (ValueError, KeyError, TypeError):
            return
        with self._lock:
            old = self.reports.get(worker)
            if old is None or int(msg.get("t", 0)) >= int(old.get("t", 0)):
                self.reports[worker] = msg
                self.history.setdefault(worker, deque(maxlen=HISTORY)).append(msg)

    def snapshot(self) -> ProgressSnapshot:
        with self._lock:
            return merge(consistent_cut({w: list(h) for w, h in self.history.items()}))

    def _run(self) -> None:
        start = last = self.clock()
        prev: ProgressSnapshot | None = None
        while not self._stop.is_set():
            self._receive()
            now = self.clock()
            if now - last >= self.interval_s:
                snap = self.snapshot()
                line = format_line(now - start, snap, prev, now - last)
                self.lines.append(line)
                if self.enabled:
                    print(line, file=self.out, flush=True)
                prev, last = snap, now

    def stop(self) -> ProgressSnapshot:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        self._sock.close()
        return self.snapshot()
