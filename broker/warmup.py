"""Pay the broker's first-use costs on a thread at a client's first request, not on the loop at its first send.

A fresh broker keeps its start fast and its idle memory small by deferring work to first use (issue 15):
numpy's import (``broker.deferred_import``, ~0.1-0.25 s of CPU) and the store's worker threads
(``ThreadPoolExecutor`` starts one per submit while none is idle, and ``Thread.start`` waits until the new thread
has run, which on a busy machine took the loop 86 ms). Both used to land on the event loop with the first
messages: the loop stood still for 150-260 ms and sends queued behind it failed with ``TIMEOUT_CLEAN_QUEUE``
(fast failure at 200 ms in the send queue) while the Java broker failed none.

A client's first request to the embedded name server (its routes) or to the broker (its heartbeat) is the
earliest sign that messages will follow, and an idle broker still pays nothing: not at a bare connection either,
so a port probe (a health check, ``bench.boot_figures``) does not load numpy into an idle broker. The
thread holds the GIL in slices (the interpreter's switch interval), so the loop keeps answering meanwhile; a send
that needs numpy before the thread is done waits on the module's lock for the rest of the import only.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from broker.deferred_import import deferred_names, load

if TYPE_CHECKING:
    from remoting.command import RemotingCommand

log = structlog.get_logger("broker.warmup")


def start_all_threads(executor: ThreadPoolExecutor, workers: int, timeout_s: float = 2.0) -> None:
    """Make ``executor`` start all ``workers`` threads now: each task waits at a barrier until all have started,
    so no thread is idle when the next is submitted and each submit starts a new one. Called off the loop."""
    barrier = threading.Barrier(workers)

    def meet() -> None:
        try:
            barrier.wait(timeout_s)
        except threading.BrokenBarrierError:  # fewer threads than asked (a pool already partly busy): fine
            pass

    for future in [executor.submit(meet) for _ in range(workers)]:
        future.result()


@dataclass
class FirstClientWarmup:
    """``on_client`` at every client request it watches; the first starts the warm-up thread, the others return."""

    #: thread pools to fill, with their sizes
    executors: tuple[tuple[ThreadPoolExecutor, int], ...] = ()
    _thread: threading.Thread | None = field(default=None, init=False)

    def on_client(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="first-client-warmup", daemon=True)
            self._thread.start()

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the warm-up (tests); True once it is done or was never started."""
        if self._thread is not None:
            self._thread.join(timeout_s)
            return not self._thread.is_alive()
        return True

    def _run(self) -> None:
        began = time.perf_counter()
        try:
            for executor, workers in self.executors:
                start_all_threads(executor, workers)
            modules = deferred_names()
            for name in modules:
                load(name)
        except Exception:  # noqa: BLE001 - a warm-up that fails leaves the work to its first use, as before
            log.exception("first-client warm-up failed; the first requests pay for it")
            return
        log.info(
            "first-client warm-up done", modules=modules, elapsed_ms=round((time.perf_counter() - began) * 1000, 1)
        )


@dataclass
class WarmupOnRequest:
    """A processor that starts ``warmup`` at its first request and hands every request to ``processor``. Put on the
    name server's routes and the broker's HEART_BEAT: low-rate requests a client makes before its first message."""

    processor: Any
    warmup: FirstClientWarmup

    async def process_request(self, channel: Any, request: RemotingCommand) -> RemotingCommand | None:
        self.warmup.on_client()
        return await self.processor.process_request(channel, request)

    def reject_request(self) -> bool:
        reject = getattr(self.processor, "reject_request", None)
        return bool(reject()) if reject is not None else False
