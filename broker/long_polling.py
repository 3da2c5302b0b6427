"""PullRequestHoldService: parks pulls that found nothing and wakes them on arrival or at their deadline.

A pull answered PULL_NOT_FOUND with the suspend bit is held (no reply) for ``suspendTimeoutMillis``
(or ``shortPollingTimeMills`` when long polling is off). A message dispatched to the same queue whose
tag code matches re-runs the pull at once; otherwise a timer re-runs it at its deadline, which then
answers whatever the store has (PULL_NOT_FOUND if still nothing). Upstream checks every 5 s; this one
answers on time, with ONE loop timer for all parked pulls instead of a ``call_later`` handle each: a caught-up
consumer parks and is woken once per message, and its pull's timer was made and cancelled every time. Each park
pushes its deadline on a heap and arms the timer only if it is due before the armed time (every park of a consumer
with one suspend timeout finds it armed). When the timer fires it pops what is due, answers the pulls still
parked (in deadline order) and arms itself at the next deadline. A pull woken by an arrival leaves its heap entry
behind; such entries are dropped when popped, and the heap is rebuilt from the table when they outnumber the
parked pulls, so a busy caught-up consumer neither grows the heap nor makes a firing scan every parked pull (a
broker with thousands parked on idle queues, each due at its own time, fires once per deadline).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Any, NamedTuple

import structlog

log = structlog.get_logger(__name__)


class PullRequest(NamedTuple):
    """A parked pull. A tuple made in one C call (``tuple.__new__``, as the processor builds it): a caught-up
    consumer parks one per message, and the slotted dataclass's ``__init__`` stored its fields one by one. Compared
    by identity wherever the hold service looks for one (``is``), never by value."""

    request: Any  # RemotingCommand
    channel: Any
    topic: str
    queue_id: int
    pull_from_this_offset: int
    subscription: Any  # SubscriptionData
    message_filter: Any  # what arrivals are matched with (None: every arrival matches)
    header: Any = None  # the decoded PullMessageRequestHeader, reused when the pull is re-run
    # the outcome of its checks when it parked (the pull processor's: table versions, subscription, filter), reused
    # by its re-run while those versions stay put
    checked: Any = None


# A deadline this close to the loop's time counts as passed when the timer fires (the loop's timers have
# millisecond resolution: one may fire a little before the exact float it was armed at).
DEADLINE_RESOLUTION_S = 0.001
_NEVER = float("inf")
_heappush = heapq.heappush  # (a global: one load fewer a park)
# The heap of deadlines is rebuilt when it holds more than this many entries and twice the parked pulls.
_REBUILD_FLOOR = 1024


class PullRequestHoldService:
    def __init__(
        self,
        wake: Callable[[PullRequest], None],
        max_offset: Callable[[str, int], int],
        expire: Callable[[PullRequest], None] | None = None,
    ) -> None:
        """``wake``: re-runs a pull an arrival woke (the broker's, in rounds: `broker.pull_wake`); ``expire``: one
        whose deadline passed, answered on time (``wake`` when not given)."""
        self._wake = wake
        self._expire = wake if expire is None else expire
        self._max_offset = max_offset
        self.table: dict[tuple[str, int], list[PullRequest]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = _NEVER  # the loop time the timer fires at
        # (deadline, park number, pull): the park number orders pulls of one deadline as they parked
        self._deadlines: list[tuple[float, int, PullRequest]] = []
        self._park_numbers = itertools.count(1)
        self._rebuild_at = _REBUILD_FLOOR  # the heap size at which entries of woken pulls are dropped

    def suspend(self, pr: PullRequest, timeout_ms: int) -> None:
        key = (pr.topic, pr.queue_id)
        table = self.table
        queue = table.get(key)
        if queue is None:
            table[key] = [pr]
        else:
            queue.append(pr)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (timeout_ms / 1000 if timeout_ms > 0 else 0)
        heap = self._deadlines
        _heappush(heap, (deadline, next(self._park_numbers), pr))
        if len(heap) > self._rebuild_at:
            self._rebuild()
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
        heap = self._deadlines
        table = self.table
        expired: list[PullRequest] = []
        while heap and heap[0][0] <= due_by:
            pr = heapq.heappop(heap)[2]
            key = (pr.topic, pr.queue_id)
            queue = table.get(key)
            if not queue:
                continue  # woken by an arrival, or its channel closed
            kept = [p for p in queue if p is not pr]
            if len(kept) == len(queue):
                continue
            if kept:
                table[key] = kept
            else:
                del table[key]
            expired.append(pr)
        if heap:
            self._timer = loop.call_at(heap[0][0], self._on_deadlines)
            self._timer_at = heap[0][0]
        expire = self._expire
        for pr in expired:
            expire(pr)

    def _rebuild(self) -> None:
        """Drop the heap entries of pulls no longer parked: the heap again holds just the table's pulls."""
        live = {id(pr) for queue in self.table.values() for pr in queue}
        self._deadlines = [entry for entry in self._deadlines if id(entry[2]) in live]
        heapq.heapify(self._deadlines)
        self._rebuild_at = max(_REBUILD_FLOOR, 2 * len(self._deadlines))

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

    def notify_rows_arriving(self, rows: list, results: list) -> None:
        """`notify_message_arriving` for each row of a group of sends the store put in one pass (``rows``: its
        ``SendRow`` tuples, topic, queue id, _, properties, _, tags code, ...; ``results``: (msg id, queue offset,
        ...) each), in one pass over the group: a row whose queue has nothing parked costs one lookup, and the
        queue's single parked pull (a caught-up consumer's) is matched here, without a call a row."""
        table = self.table
        for row, result in zip(rows, results):
            key = (row[0], row[1])
            queue = table.get(key)
            if not queue:
                continue
            if len(queue) != 1:
                self.notify_message_arriving(row[0], row[1], result[1] + 1, row[5], row[3])
                continue
            pr = queue[0]  # (notify_message_arriving's single parked pull, unrolled)
            flt = pr.message_filter
            if result[1] >= pr.pull_from_this_offset and (
                flt is None
                or (
                    flt.is_matched_by_consume_queue(row[5]) and (row[3] is None or flt.is_matched_by_properties(row[3]))
                )
            ):
                del table[key]
                self._wake(pr)

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
        self._deadlines.clear()
        return parked

    @property
    def parked_count(self) -> int:
        return sum(len(q) for q in self.table.values())
