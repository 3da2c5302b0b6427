"""BrokerFastFailure: the 10 ms sweeper that answers queued requests the broker will not serve in time.

It only looks at request queues and the store's busy signal, as upstream's BrokerFastFailure does:
(1) while the OS page cache is busy, answer the head of the send queue with ``[PCBUSY_CLEAN_QUEUE]``;
(2) for the send, pull, heartbeat and end-transaction queues, answer every head that has waited at
least its limit with ``[TIMEOUT_CLEAN_QUEUE]``. Clients then fail fast (and may retry elsewhere)
instead of burning their whole timeout on a broker that cannot keep up.

The sweeper runs on the broker's event loop, so it only keeps its 10 ms beat because nothing on the loop
blocks — a stuck append awaits (see ``store.commit_log``), and the busy signal it reads is the time
the append section has been held, computed from the injected clock at each tick.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from remoting.codes import ResponseCode
from remoting.executor import RequestExecutor

log = structlog.get_logger(__name__)

PCBUSY_REMARK = (
    "[PCBUSY_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: %sms, size of queue: %d"
)
TIMEOUT_REMARK = (
    "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while, period in queue: %sms, size of queue: %d"
)


@dataclass(slots=True)
class SweptQueue:
    executor: RequestExecutor
    max_wait_ms: Callable[[], int]  # read each tick: updateBrokerConfig may change it


class BrokerFastFailure:
    def __init__(
        self,
        *,
        send_executor: RequestExecutor,
        queues: list[SweptQueue],
        is_page_cache_busy: Callable[[], bool],
        now_ms: Callable[[], int],
        enabled: Callable[[], bool],
        on_shed: Callable[[str, str, int], None] | None = None,
        interval_s: float = 0.010,
        start_delay_s: float = 1.0,
    ) -> None:
        self._send = send_executor
        self._queues = queues
        self._busy = is_page_cache_busy
        self._now_ms = now_ms
        self._enabled = enabled
        self._on_shed = on_shed
        self._interval_s = interval_s
        self._start_delay_s = start_delay_s
        self._task: asyncio.Task[None] | None = None
        self._last_error_log_ms = -1_000_000
        self.ticks = 0  # sweeps made (a disabled beat sweeps nothing and is not counted)
        self.beats = 0  # loop iterations, enabled or not
        # futures of ``next_beat`` callers, resolved at the end of the next beat; None while nobody waits, so a
        # beat costs one attribute test for it
        self._beat_waiters: list[asyncio.Future[int]] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="broker-fast-failure")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def next_beat(self) -> int:
        """Wait for the end of the sweeper's next beat (its sweep done, or skipped while disabled); returns the
        beat's number. What a test waits on instead of sleeping past the start delay and a few intervals."""
        if self._beat_waiters is None:
            self._beat_waiters = []
        waiter: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._beat_waiters.append(waiter)
        return await waiter

    async def _run(self) -> None:
        await asyncio.sleep(self._start_delay_s)
        # one line when the sweeps begin: a broker subprocess's tests wait for it instead of a fixed sleep
        log.info("fast failure sweeper started", interval_ms=round(self._interval_s * 1000, 3))
        while True:
            if self._enabled():
                try:
                    self.clean_expired_request()
                except Exception:
                    now = self._now_ms()
                    if now - self._last_error_log_ms >= 1000:  # a persistent bug: one line a second, not 100
                        self._last_error_log_ms = now
                        log.exception("fast failure sweep failed")
            self.beats += 1
            if self._beat_waiters is not None:
                self._end_beat()
            await asyncio.sleep(self._interval_s)

    def _end_beat(self) -> None:
        waiters, self._beat_waiters = self._beat_waiters, None
        for waiter in waiters or ():
            if not waiter.done():
                waiter.set_result(self.beats)

    def clean_expired_request(self) -> int:
        """One sweep; returns how many requests it answered."""
        self.ticks += 1
        answered = 0
        send_queue = self._send.queue
        while send_queue and self._busy():
            task = send_queue.popleft()
            if task.stopped:
                continue
            self._send.expired += 1
            behind = self._now_ms() - task.create_ms
            task.return_response(ResponseCode.SYSTEM_BUSY, PCBUSY_REMARK % (behind, len(send_queue)))
            answered += 1
            if self._on_shed is not None:
                self._on_shed(self._send.name, "PCBUSY_CLEAN_QUEUE", 1)
        for swept in self._queues:
            answered += self._clean_queue(swept.executor, swept.max_wait_ms())
        return answered

    def _clean_queue(self, executor: RequestExecutor, max_wait_ms: int) -> int:
        queue = executor.queue
        if not queue:  # (the usual sweep: no clock read)
            return 0
        answered = 0
        now = self._now_ms()
        while queue:
            task = queue[0]
            if task.stopped:
                queue.popleft()
                continue
            behind = now - task.create_ms
            if behind < max_wait_ms:
                break
            queue.popleft()
            executor.expired += 1
            task.return_response(ResponseCode.SYSTEM_BUSY, TIMEOUT_REMARK % (behind, len(queue)))
            answered += 1
        if answered and self._on_shed is not None:
            self._on_shed(executor.name, "TIMEOUT_CLEAN_QUEUE", answered)
        return answered
