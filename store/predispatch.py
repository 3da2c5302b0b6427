"""PreDispatch: rebuild consume queues and the index from records the crash-recovery scan has already
verified, while the scan goes on.

After a crash the store scans the CommitLog (magic and CRC of every record) and then dispatches what the
consume queues and the index do not hold. Run one after the other, the scan (Python, holds the GIL) and
the parse of the dispatch (numpy, mostly without it) leave one of the two cores idle: 1 KiB records took
~0.9 s/GiB to scan plus ~1.3 s/GiB to rebuild. Here the scan hands each verified chunk to a worker
thread for `RecordParser.parse_many` and the event loop dispatches the parsed chunks in CommitLog order as
they come, so the three overlap.

Only a contiguous run is pre-dispatched: from the offset the dispatch would start at anyway (`arm`),
chunk after chunk, across the BLANK end of a file into the next. Anything else (the scan starts later
than that offset, a chunk that does not follow) switches it off, and the ordinary reput after recovery
does the rest. Every record it dispatches lies before the end the scan accepts, so what recovery cuts
afterwards (a torn tail, consume queue entries beyond it) is untouched by it. At most `max_in_flight`
chunks wait to be dispatched: the scan blocks rather than hold the whole log's facts in memory.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from bisect import bisect_left
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, Future

import structlog

from store.commit_log import CommitLog
from store.record_parser import BULK_RECORDS, ParsedRecords

log = structlog.get_logger(__name__)

_INT = struct.Struct(">i")


class PreDispatch:
    def __init__(
        self,
        commit_log: CommitLog,
        executor: Executor,
        dispatch: Callable[[ParsedRecords], Awaitable[None]],
        advanced: Callable[[int, int], None],
        end_round: Callable[[], Awaitable[None] | None],
        *,
        with_keys: bool,
        max_in_flight: int = 8,
    ) -> None:
        """`dispatch` writes parsed records to the queues and the index (on the loop); `advanced(end, n)`
        is told that the records before CommitLog offset `end` are dispatched (`n` more of them);
        `end_round` finishes each chunk as the reput's rounds do (index keys, the next index file)."""
        self.commit_log = commit_log
        self._executor = executor
        self._dispatch = dispatch
        self._advanced = advanced
        self._end_round = end_round
        self._with_keys = with_keys
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[tuple[Future, int, int] | None] = asyncio.Queue()
        self._slots = threading.Semaphore(max_in_flight)
        self._expected = -1  # CommitLog offset of the next record to hand over; -1: not armed
        self._enabled = False
        self._failed = False
        self.dispatched = 0
        self._task = self._loop.create_task(self._consume(), name="recovery-predispatch")

    # ------------------------------------------------------------------------------ the scan's thread
    def arm(self, start_offset: int) -> None:
        """Pre-dispatch from `start_offset` on (where the dispatch after recovery would start)."""
        self._expected = start_offset
        self._enabled = True

    def on_verified(self, file_from: int, view: memoryview, positions: list[int]) -> None:
        """The scan accepted the records at `positions` of the file starting at CommitLog offset
        `file_from` (consecutive, in order). Blocking: called on the scan's worker thread."""
        if not self._enabled or not positions or file_from + positions[-1] < self._expected:
            return  # (all of them in the queues already: the usual crash, where the scan re-reads them)
        for i in range(0, len(positions), BULK_RECORDS):  # chunks of the reput's size: finer pipelining
            if not self._enabled:
                return
            self._hand_over(file_from, view, positions[i : i + BULK_RECORDS])

    def _hand_over(self, file_from: int, view: memoryview, positions: list[int]) -> None:
        if not positions:
            return
        expected = self._expected
        first = file_from + positions[0]
        if first < expected:
            # records the queues hold already (the dispatch starts later): skip them
            positions = positions[bisect_left(positions, expected - file_from) :]
            if not positions:
                return
            first = file_from + positions[0]
        file_size = self.commit_log.mapped_file_size
        next_file = expected - expected % file_size + file_size
        if first != expected and not (positions[0] == 0 and file_from == next_file):
            self._enabled = False  # not contiguous with what was handed over: the reput does the rest
            return
        last = positions[-1]
        end = file_from + last + _INT.unpack_from(view, last)[0]
        while not self._slots.acquire(timeout=0.5):
            if self._failed:
                self._enabled = False
                return
        fut = self._executor.submit(self.commit_log.parser.parse_many, view, positions, self._with_keys)
        self._expected = end
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (fut, len(positions), end))

    # ---------------------------------------------------------------------------------------- the loop
    async def _consume(self) -> None:
        while True:
            item = await self._queue.get()
            if item is None:
                return
            fut, count, end = item
            try:
                parsed, n = await asyncio.wrap_future(fut)
            finally:
                self._slots.release()
            if self._failed:
                continue
            if n != count:
                # the scan verified these records: a parse that disagrees stops the pre-dispatch
                log.error("recovery pre-dispatch: parse disagrees with the scan", verified=count, parsed=n)
                self._failed = True
                continue
            try:
                await self._dispatch(parsed)
                pending = self._end_round()
                if pending is not None:
                    await pending
            except BaseException:
                self._failed = True
                raise
            self.dispatched += n
            self._advanced(end, n)

    async def finish(self) -> None:
        """Wait until everything handed over is dispatched (after the scan returned)."""
        self._enabled = False
        self._queue.put_nowait(None)
        try:
            await self._task
        finally:
            self._failed = True  # a scan thread still waiting for a slot gives up
