"""PullRequestHoldService: parks pulls that found nothing and wakes them on arrival or at their deadline.

A pull answered PULL_NOT_FOUND with the suspend bit is held (no reply) for ``suspendTimeoutMillis``
(or ``shortPollingTimeMills`` when long polling is off). A message dispatched to the same queue whose
tag code matches re-runs the pull at once; otherwise a timer re-runs it at its deadline, which then
answers whatever the store has (PULL_NOT_FOUND if still nothing). Upstream checks every 5 s; a
per-request timer answers on time instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

log = structlog.get_logger(__name__)


@dataclass(eq=False, slots=True)
class PullRequest:
    request: Any  # RemotingCommand
    channel: Any
    topic: str
    queue_id: int
    pull_from_this_offset: int
    subscription: Any  # SubscriptionData
    message_filter: Any
    deadline_handle: asyncio.TimerHandle | None = field(default=None)
    header: Any = None  # the decoded PullMessageRequestHeader, reused when the pull is re-run


class PullRequestHoldService:
    def __init__(self, wake: Callable[[PullRequest], None], max_offset: Callable[[str, int], int]) -> None:
        self._wake = wake
        self._max_offset = max_offset
        self.table: dict[tuple[str, int], list[PullRequest]] = {}

    def suspend(self, pr: PullRequest, timeout_ms: int) -> None:
        loop = asyncio.get_running_loop()
        key = (pr.topic, pr.queue_id)
        self.table.setdefault(key, []).append(pr)
        pr.deadline_handle = loop.call_later(max(timeout_ms, 0) / 1000, self._on_deadline, pr)

    def _remove(self, pr: PullRequest) -> bool:
        queue = self.table.get((pr.topic, pr.queue_id))
        if not queue:
            return False
        try:
            queue.remove(pr)
        except ValueError:
            return False
        if not queue:
            del self.table[(pr.topic, pr.queue_id)]
        return True

    def _on_deadline(self, pr: PullRequest) -> None:
        if self._remove(pr):
            self._wake(pr)

    def notify_message_arriving(
        self,
        topic: str,
        queue_id: int,
        max_offset: int,
        tags_code: int | None,
        properties: dict[str, str] | None = None,
    ) -> None:
        """Called after a message is dispatched to ``topic``/``queue_id`` (its new max offset)."""
        queue = self.table.get((topic, queue_id))
        if not queue:
            return
        keep: list[PullRequest] = []
        for pr in queue:
            if max_offset > pr.pull_from_this_offset and self._matches(pr, tags_code, properties):
                if pr.deadline_handle is not None:
                    pr.deadline_handle.cancel()
                self._wake(pr)
            else:
                keep.append(pr)
        if keep:
            self.table[(topic, queue_id)] = keep
        else:
            del self.table[(topic, queue_id)]

    @staticmethod
    def _matches(pr: PullRequest, tags_code: int | None, properties: dict[str, str] | None) -> bool:
        flt = pr.message_filter
        if flt is None:
            return True
        if not flt.is_matched_by_consume_queue(tags_code):
            return False
        return properties is None or flt.is_matched_by_properties(properties)

    def on_channel_closed(self, channel: Any) -> None:
        for key, queue in list(self.table.items()):
            kept = [pr for pr in queue if pr.channel is not channel]
            for pr in queue:
                if pr.channel is channel and pr.deadline_handle is not None:
                    pr.deadline_handle.cancel()
            if kept:
                self.table[key] = kept
            else:
                del self.table[key]

    def shutdown(self) -> list[PullRequest]:
        """Cancel all timers; returns the parked requests so the caller can answer them."""
        parked = [pr for queue in self.table.values() for pr in queue]
        for pr in parked:
            if pr.deadline_handle is not None:
                pr.deadline_handle.cancel()
        self.table.clear()
        return parked

    @property
    def parked_count(self) -> int:
        return sum(len(q) for q in self.table.values())
