"""PullRequestHoldService: parks pulls that found nothing and wakes them on arrival or at their deadline.

A pull answered PULL_NOT_FOUND with the suspend bit is held (no reply) for ``suspendTimeoutMillis``
(or ``shortPollingTimeMills`` when long polling is off). A message dispatched to the same queue whose
tag code matches re-runs the pull at once; otherwise a timer re-runs it at its deadline, which then
answers whatever the store has (PULL_NOT_FOUND if still nothing). Upstream checks every 5 s; this one
answers on time, with ONE loop timer for all parked pulls instead of a ``call_later`` handle each: a caught-up
consumer parks and is woken once per message, and its pull's timer was made and cancelled every time. The timer
is armed at the earliest deadline of the parked pulls; a park with a later deadline (every park of a consumer
with one suspend timeout) only records it. When it fires it answers the pulls whose deadlines have passed (in
deadline order) and arms itself at the next one; pulls woken by arrivals before that are simply gone from the
table. With the Java consumer's 15 s the timer fires about once per 15 s, finding nothing expired.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
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
    deadline: float = 0.0  # the loop time it is answered at if nothing arrives (set by suspend)
    header: Any = None  # the decoded PullMessageRequestHeader, reused when the pull is re-run


# A deadline this close to the loop's time counts as passed when the timer fires (the loop's timers have
# millisecond resolution: one may fire a little before the exact float it was armed at).
DEADLINE_RESOLUTION_S = 0.001
_NEVER = float("inf")


class PullRequestHoldService:
    def __init__(self, wake: Callable[[PullRequest], None], max_offset: Callable[[str, int], int]) -> None:
        self._wake = wake
        self._max_offset = max_offset
        self.table: dict[tuple[str, int], list[PullRequest]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = _NEVER  # the loop time the timer fires at

    def suspend(self, pr: PullRequest, timeout_ms: int) -> None:
        key = (pr.topic, pr.queue_id)
        queue = self.table.get(key)
        if queue is None:
            self.table[key] = [pr]
        else:
            queue.append(pr)
        loop = asyncio.get_running_loop()
        deadline = pr.deadline = loop.time() + (timeout_ms / 1000 if timeout_ms > 0 else 0)
        if deadline < self._timer_at:  # the first parked pull, or one due before the armed time
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(deadline, self._on_deadlines)
            self._timer_at = deadline

    def _on_deadlines(self) -> None:
        """The timer: answer every parked pull whose deadline has passed, then arm for the next deadline."""
        self._timer = None
        self._timer_at = _NEVER
        loop = asyncio.get_running_loop()
        due_by = loop.time() + DEADLINE_RESOLUTION_S
        expired: list[PullRequest] = []
        next_at = _NEVER
        table = self.table
        for key, queue in list(table.items()):
            kept = []
            for pr in queue:
                if pr.deadline <= due_by:
                    expired.append(pr)
                else:
                    kept.append(pr)
                    if pr.deadline < next_at:
                        next_at = pr.deadline
            if not kept:
                del table[key]
            elif len(kept) != len(queue):
                table[key] = kept
        if next_at != _NEVER:
            self._timer = loop.call_at(next_at, self._on_deadlines)
            self._timer_at = next_at
        expired.sort(key=_deadline)  # (stable: pulls of one deadline in the order they parked)
        wake = self._wake
        for pr in expired:
            wake(pr)

    def notify_message_arriving(
        self,
        topic: str,
        queue_id: int,
        max_offset: int,
        tags_code: int | None,
        properties: dict[str, str] | None = None,
    ) -> None:
        """Called after a message is dispatched to ``topic``/``queue_id`` (its new max offset). (A queue with one
        parked pull, a caught-up consumer's, is the common case: checked without building a list.)"""
        key = (topic, queue_id)
        queue = self.table.get(key)
        if not queue:
            return
        if len(queue) == 1:
            pr = queue[0]
            flt = pr.message_filter
            if max_offset > pr.pull_from_this_offset and (
                flt is None
                or (
                    flt.is_matched_by_consume_queue(tags_code)
                    and (properties is None or flt.is_matched_by_properties(properties))
                )
            ):
                del self.table[key]
                self._wake(pr)
            return
        keep: list[PullRequest] = []
        for pr in queue:
            if max_offset > pr.pull_from_this_offset and self._matches(pr, tags_code, properties):
                self._wake(pr)
            else:
                keep.append(pr)
        if keep:
            self.table[key] = keep
        else:
            del self.table[key]

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
            if kept:
                self.table[key] = kept
            else:
                del self.table[key]

    def shutdown(self) -> list[PullRequest]:
        """Cancel the timer; returns the parked requests so the caller can answer them."""
        parked = [pr for queue in self.table.values() for pr in queue]
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
            self._timer_at = _NEVER
        self.table.clear()
        return parked

    @property
    def parked_count(self) -> int:
        return sum(len(q) for q in self.table.values())


def _deadline(pr: PullRequest) -> float:
    return pr.deadline
