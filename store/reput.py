"""ReputMessageService: dispatch from the CommitLog to the consume queues and the index, behind the writer.

`reput_from_offset` only moves forward over readable CommitLog bytes (committed bytes when a transient
pool is used). Records the writer just appended come with their dispatch facts already known (the
writer's `dispatch_queue`), so they are not parsed again; anything else (after a restart, after a BLANK
filler) is parsed from the CommitLog. At start the reput begins at the largest CommitLog offset the
consume queues already hold (upstream), so its place is derived from the queues themselves and
survives any restart; a queue that lost its files makes the store replay from the CommitLog start.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import structlog

from store.commit_log import CommitLog, DispatchBatch
from store.record_parser import BULK_RECORDS, ParsedRecords

if TYPE_CHECKING:
    from store.dispatcher import CommitLogDispatcher

log = structlog.get_logger(__name__)

_INT = struct.Struct(">i")


def _total_size(commit_log: CommitLog, offset: int) -> int:
    view = commit_log.get_message(offset, 4)
    return _INT.unpack_from(view, 0)[0] if view is not None else 0


# bound the work of one synchronous stretch so the loop stays responsive during a long catch-up
_YIELD_EVERY = 2048
# below this many records a chunk is parsed on the loop's thread (a worker round trip costs more)
_PARALLEL_PARSE_MIN = 4096


class ReputMessageService:
    def __init__(
        self,
        commit_log: CommitLog,
        dispatcher: CommitLogDispatcher,
        run_blocking: Callable[..., Awaitable[Any]] | None = None,
    ) -> None:
        """The dispatcher's `dispatch` writes one request synchronously; `prepare` returns None when the
        files it needs exist, else an awaitable creating them (in a worker thread); `end_round` finishes
        batched work (the index) before any await and at the end, and may return an awaitable too;
        `dispatch_many` dispatches records parsed in bulk from the CommitLog (same effects as `dispatch`
        for each, files created as needed; set `_dispatch_many` to None to go record by record);
        `dispatch_described_batch` dispatches a batch descriptor at once (and moves
        `reput_from_offset` past it), or returns False to have it dispatched record by record.
        `run_blocking` runs a function in a worker thread (bulk parsing, two chunks at once)."""
        self.commit_log = commit_log
        self._dispatch = dispatcher.dispatch
        self._prepare = dispatcher.prepare
        self._end_round = dispatcher.end_round
        self._dispatch_many: Callable[[ParsedRecords], Awaitable[None]] | None = dispatcher.dispatch_many
        self._dispatch_batch: Callable[[DispatchBatch], bool] | None = dispatcher.dispatch_described_batch
        self._run_blocking = run_blocking
        self.with_keys = True  # the bulk parser also extracts index keys (off when the index is)
        self.reput_from_offset = 0
        self._running = False
        self._again = False
        self._task: asyncio.Task | None = None
        self.dispatched_total = 0
        # puts waiting for their records to be dispatched by the running catch-up: (end offset, future)
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._closed = False

    @property
    def running(self) -> bool:
        """A catch-up is in progress (it may be suspended in an await)."""
        return self._running

    def behind(self) -> int:
        return self.commit_log.get_max_offset() - self.reput_from_offset

    def close(self) -> None:
        """No catch-up from now on (the store closes its files next)."""
        self._closed = True

    def wakeup(self) -> None:
        """Schedule a catch-up (from the commit service, after bytes became readable)."""
        if self._closed:
            return
        if self._running:
            self._again = True
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.catch_up(), name="reput")

    async def catch_up(self) -> None:
        """Dispatch everything readable. Single-flight: a call while one runs makes that one go again."""
        if self._running:
            self._again = True
            return
        if self._closed:
            return
        self._running = True
        try:
            while True:
                self._again = False
                await self._do_reput()
                await self._finish_round()
                self._release_waiters(self.reput_from_offset)
                if not self._again:
                    break
        finally:
            self._running = False
            self._release_waiters(None)  # whatever it could not reach (uncommitted bytes) never hangs a put

    async def drain(self) -> None:
        """Dispatch everything readable and return only once no catch-up runs (a shutdown, before the
        files close): `catch_up` returns at once while another one runs, which may still be suspended
        in an await (a worker-thread parse, a new file) and would write into closed files."""
        while True:
            task = self._task
            if task is not None and not task.done():
                try:
                    await task
                except Exception:
                    log.exception("dispatch failed")
                continue
            if self._running:  # a put waiting in wait_dispatched runs this one
                await asyncio.sleep(0.001)
                continue
            await self.catch_up()
            if not self._running and (self._task is None or self._task.done()):
                return

    async def wait_dispatched(self, offset: int) -> None:
        """Return once the records before CommitLog `offset` are dispatched: run a catch-up, or, while
        one runs, wait for it to get there (so puts cannot outrun the dispatch)."""
        if not self._running:
            await self.catch_up()
            return
        self._again = True
        if self.reput_from_offset >= offset:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((offset, fut))
        await fut

    def _release_waiters(self, reached: int | None) -> None:
        if not self._waiters:
            return
        keep = []
        for offset, fut in self._waiters:
            if reached is None or offset <= reached:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((offset, fut))
        self._waiters = keep

    async def _pause(self) -> None:
        """Between stretches of a long catch-up: finish the round (index keys), answer the puts it
        reached, let the loop run."""
        await self._finish_round()
        self._release_waiters(self.reput_from_offset)
        await asyncio.sleep(0)

    async def _finish_round(self) -> None:
        pending = self._end_round()
        if pending is not None:
            await pending

    async def _do_reput(self) -> None:
        cl = self.commit_log
        min_offset = cl.get_min_offset()
        if self.reput_from_offset < min_offset:
            log.warning(
                "reputFromOffset is below the CommitLog min offset (files expired before dispatch)",
                reput_from=self.reput_from_offset,
                min_offset=min_offset,
            )
            self.reput_from_offset = min_offset
        dq = cl.dispatch_queue
        done = 0
        while True:
            max_offset = cl.get_max_offset()
            if self.reput_from_offset >= max_offset:
                break
            # fast path: the writer already described this record
            while dq and dq[0].commit_log_offset < self.reput_from_offset:
                dq.popleft()
            if dq and dq[0].commit_log_offset == self.reput_from_offset:
                req = dq[0]
                if req.commit_log_offset + req.msg_size > max_offset:
                    break  # not committed yet
                if isinstance(req, DispatchBatch):
                    dq.popleft()
                    if self._dispatch_batch is None or not self._dispatch_batch(req):
                        dq.extendleft(reversed(cl.parser.expand(req)))  # record by record (files to create, ...)
                        continue
                    done += len(req.request.msgs)
                    if done >= _YIELD_EVERY:
                        done = 0
                        await self._pause()
                    continue
                pending = self._prepare(req)
                if pending is not None:
                    await self._finish_round()
                    await pending
                    continue
                dq.popleft()
                self._dispatch(req)
                self.reput_from_offset += req.msg_size
                self.dispatched_total += 1
                done += 1
                if done >= _YIELD_EVERY:
                    done = 0
                    await self._pause()
                continue
            progressed = await self._reput_from_log(max_offset)
            if not progressed:
                break
            done += 1
            if done % _YIELD_EVERY == 0:
                await self._pause()

    async def _reput_from_log(self, max_offset: int) -> bool:
        """Parse and dispatch records at reput_from_offset until the writer's descriptors take over."""
        if self._dispatch_many is not None:
            return await self._reput_bulk()
        cl = self.commit_log
        data = cl.get_data(self.reput_from_offset)  # (it starts at that offset)
        if data is None:
            return False
        start, view = data
        pos = 0
        dq = cl.dispatch_queue
        count = 0
        while pos < len(view):
            if dq and dq[0].commit_log_offset == self.reput_from_offset:
                return True  # the fast path continues from here
            size, req = cl.parser.parse_dispatch(view, pos, False)
            if size > 0 and req is not None:
                pending = self._prepare(req)
                if pending is not None:
                    await self._finish_round()
                    await pending
                    # the view is still valid: the file cannot go away while we hold it here
                self._dispatch(req)
                self.dispatched_total += 1
                self.reput_from_offset += size
                pos += size
                count += 1
                if count % _YIELD_EVERY == 0:
                    await self._finish_round()
                    await asyncio.sleep(0)
                continue
            if size == 0:
                self.reput_from_offset = cl.roll_next_file(self.reput_from_offset)
                return True
            log.error("[BUG] dispatch found an unreadable record", offset=self.reput_from_offset)
            # skip the rest of this readable region, as upstream does on a master
            self.reput_from_offset = start + len(view)
            return True
        return pos > 0

    def _known_positions(self, start: int, pos: int, stop: int, end: int) -> tuple[list[int], int, int]:
        """Record positions the recovery scan found from `pos` on (in the file of CommitLog offset
        `start`), as `walk` would return them; none if the scan did not cover `pos`."""
        file_start = start - start % self.commit_log.mapped_file_size
        known = self.commit_log.recovery.recovered_positions.get(file_start)
        if known is None:
            return [], pos, 1
        base = start - file_start  # the view starts here in the file
        i = int(np.searchsorted(known, base + pos))
        if i >= len(known) or int(known[i]) != base + pos:
            return [], pos, 1
        chunk = known[i : i + BULK_RECORDS] - base
        if stop >= 0:
            chunk = chunk[chunk < stop]
        chunk = chunk[chunk < end]
        if not len(chunk):
            return [], pos, 1
        last = int(chunk[-1])
        after = last + _total_size(self.commit_log, start + last)
        return chunk.tolist(), after, 1

    async def _parse(self, view: memoryview, positions: list[int]) -> list[tuple[ParsedRecords, int, bool]]:
        """`parse_many` of `positions` as (records, how many are valid, all of them valid) parts in
        CommitLog order. A long chunk is parsed as two halves on two worker threads at once: the
        parse is mostly numpy, which runs without the GIL (1.7x faster on two cores)."""
        cl = self.commit_log
        if self._run_blocking is None or len(positions) < _PARALLEL_PARSE_MIN:
            parsed, n = cl.parser.parse_many(view, positions, self.with_keys)
            return [(parsed, n, n == len(positions))]
        half = len(positions) // 2
        first, second = positions[:half], positions[half:]
        a, b = await asyncio.gather(
            self._run_blocking(cl.parser.parse_many, view, first, self.with_keys),
            self._run_blocking(cl.parser.parse_many, view, second, self.with_keys),
        )
        return [(a[0], a[1], a[1] == half), (b[0], b[1], b[1] == len(second))]

    async def _reput_bulk(self) -> bool:
        """`_reput_from_log` for many records at a time: walk the record chain, parse the chunk with
        numpy, dispatch it in one call (recovery and rebuilds go through here)."""
        cl = self.commit_log
        data = cl.get_data(self.reput_from_offset)  # (it starts at that offset)
        if data is None:
            return False
        start, view = data
        dq = cl.dispatch_queue
        assert self._dispatch_many is not None
        pos = 0
        progressed = False
        while True:
            stop = dq[0].commit_log_offset - start if dq and dq[0].commit_log_offset >= start else -1
            positions, after, reason = self._known_positions(start, pos, stop, len(view))
            if not positions:
                positions, after, reason = cl.parser.walk(view, pos, stop, BULK_RECORDS)
            if positions:
                n = 0
                for parsed, k, whole in await self._parse(view, positions):
                    if k:
                        await self._dispatch_many(parsed)
                        self.dispatched_total += k
                        progressed = True
                    n += k
                    if not whole:
                        break
                if n < len(positions):
                    after, reason = positions[n], -1
                self.reput_from_offset = start + after
                pos = after
                await self._finish_round()
                await asyncio.sleep(0)  # stay responsive during a long replay
            if reason == 1 and positions and pos < len(view) and pos != stop:
                continue  # the chunk was full: go on
            if reason == 0:
                self.reput_from_offset = cl.roll_next_file(self.reput_from_offset)
                return True
            if reason == -1:
                log.error("[BUG] dispatch found an unreadable record", offset=self.reput_from_offset)
                self.reput_from_offset = start + len(view)
                return True
            return progressed
