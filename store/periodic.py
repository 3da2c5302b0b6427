"""Periodic: one named chore of the store run every few seconds on the event loop, until stopped.

The clean service (retention) and the stats sampler each had the same start-once / cancel-and-wait
code around a sleep loop; this is that code once. A run that raises is logged and the chore goes on:
one failed pass must not end retention or sampling for the life of the broker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)


class Periodic:
    def __init__(self, name: str, run: Callable[[], None], interval_s: Callable[[], float]) -> None:
        self.name = name
        self.run = run
        self.interval_s = interval_s  # read before each sleep, so a config change takes effect
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop(), name=self.name)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s())
            try:
                self.run()
            except Exception:
                log.exception("store chore failed", chore=self.name)
