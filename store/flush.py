"""Flush and commit services: the coroutines that make appended bytes durable, off the event loop.

- `CommitLogFlusher.flush(least_pages)`: capture what to flush on the loop, sync in a worker thread
  the range written since the last flush (`RangeSync`: msync of that range, not a whole-file fdatasync
  that also wrote the pre-faulted window), record the new flushed positions on the loop. One flush at
  a time. Before each sync the written pages leave the mapping (`WrittenPageReleaser`), so write-back
  needs no TLB shootdowns.
- `FlushRealTimeService` (ASYNC_FLUSH): every `flushIntervalCommitLog` ms, at least
  `flushCommitLogLeastPages` pages (everything every `flushCommitLogThoroughInterval`).
- `GroupCommitService` (SYNC_FLUSH): puts register the offset they need; one fsync covers every request
  that arrived meanwhile (group commit); the put answers FLUSH_DISK_TIMEOUT after `syncFlushTimeout`.
- `CommitRealTimeService` (transient store pool): every `commitIntervalCommitLog` ms (or when woken),
  copy at least `commitCommitLogLeastPages` pages from the pool buffers into the files, then wake the
  flush and the reput (readers only see committed bytes).
- `FlushConsumeQueueService`: consume queues, index files and the checkpoint, every
  `flushIntervalConsumeQueue` ms.
- `AfterPut`: what a put does once appended (upstream handleDiskFlush): wait for the group commit, or
  wake the commit or flush service.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable

import structlog

from store.checkpoint import StoreCheckpoint
from store.config import OS_PAGE_SIZE, FlushDiskType, MessageStoreConfig
from store.fault import StoreFault
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue, RunBlocking
from store.message import MessageConst, MessageExtBrokerInner
from store.prefault import Madvise, PrefaultUnsupported
from store.range_sync import RangeSync
from store.results import AppendMessageResult, PutMessageStatus

log = structlog.get_logger(__name__)


def _fsync_files(
    targets: list[tuple[MappedFile, int]],
    delay_ms: int,
    before: Callable[[MappedFile, int], None] | None = None,
    sync_range: Callable[[MappedFile, int, int], None] | None = None,
) -> None:
    if delay_ms > 0:
        time.sleep(delay_ms / 1000)  # fault injection: a slow disk, in the worker thread only
    for f, target in targets:
        if before is not None:
            before(f, target)
        if sync_range is None:
            f.fsync()
        else:  # only what was written since the last flush (flushes are serialised: the position is stable)
            sync_range(f, f.flushed_position, target)


async def flush_queue(
    mfq: MappedFileQueue,
    least_pages: int,
    run_blocking: RunBlocking,
    delay_ms: int = 0,
    before_fsync: Callable[[MappedFile, int], None] | None = None,
    sync_range: Callable[[MappedFile, int, int], None] | None = None,
) -> bool:
    """Flush one MappedFileQueue off the loop (`before_fsync(file, target)` runs first, in the same
    worker thread; `sync_range(file, flushed, target)` instead of a whole-file fdatasync). True when there
    was nothing to flush."""
    targets = mfq.flush_targets(least_pages)
    if not targets:
        return True
    store_ts = targets[-1][0].store_timestamp
    held = [(f, t) for f, t in targets if f.hold()]
    try:
        await run_blocking(_fsync_files, held, delay_ms, before_fsync, sync_range)
    finally:
        for f, _ in held:
            f.release()
    mfq.apply_flush(held, store_ts)
    return False


class WrittenPageReleaser:
    """Drops the mapping's page-table entries of CommitLog (and consume queue) pages that are written
    and about to be flushed, so that their write-back finds nothing to write-protect.

    A page dirtied through a shared writable mapping stays mapped writable. When write-back cleans it
    (our fdatasync, or the kernel's flusher), the kernel write-protects the entry again, page by page,
    and each time flushes the TLB of every CPU the process runs on: an inter-processor interrupt per
    4 KiB page, to the core of the event loop. Measured on this 2-core VM with 4 KiB batches, that was
    a third of all CPU time (flush_tlb_mm_range, smp_call_function_many_cond) and 10 % of the append
    throughput. madvise(MADV_DONTNEED) on a shared file mapping only unmaps: the dirty state passes to
    the page cache (nothing is lost, the fsync after it writes the pages), one TLB flush covers the
    whole range, and a later read faults a page back in read-only.

    Only whole pages below the flush target go: the writer appends at or after the target, so they
    are never written again (a later write there, a consume queue truncated at recovery, just faults
    the page back in). Consume queues get the same treatment: they too are appended through their
    mapping. Runs in the flush's worker thread (the ctypes call releases the GIL)."""

    def __init__(self, madvise: Madvise) -> None:
        self._madvise = madvise
        self.enabled = True
        self.released_bytes = 0

    def __call__(self, f: MappedFile, target: int) -> None:
        if not self.enabled or f.write_buffer is not None:
            return  # (a pool buffer's bytes reach the file by pwrite: never mapped writable)
        end = target - target % OS_PAGE_SIZE
        start = f.released_position
        if end <= start:
            return
        try:
            f.released_position = self._madvise.apply(f, start, end, _never)
        except PrefaultUnsupported as exc:
            self.enabled = False
            log.warning("releasing flushed CommitLog pages from the mapping disabled", error=str(exc))
            return
        self.released_bytes += f.released_position - start


def _never() -> bool:
    return False


class _Service:
    """A periodic coroutine with wake-up, started and stopped by the store."""

    name = "service"

    def __init__(self) -> None:
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()
        self._stopped = False

    def start(self) -> None:
        if self._task is None:
            self._stopped = False
            self._task = asyncio.get_running_loop().create_task(self._guarded(), name=self.name)

    async def _guarded(self) -> None:
        while not self._stopped:
            try:
                await self.run()
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("store service failed; restarting it", service=self.name)
                await asyncio.sleep(0.1)

    def wakeup(self) -> None:
        self._wake.set()

    async def wait_for_running(self, interval_ms: int) -> None:
        if self._wake.is_set():
            self._wake.clear()
            return
        try:
            await asyncio.wait_for(self._wake.wait(), interval_ms / 1000)
        except TimeoutError:
            pass
        self._wake.clear()

    async def run(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    async def stop(self) -> None:
        self._stopped = True
        self._wake.set()
        task = self._task
        self._task = None
        if task is not None:
            try:
                await asyncio.wait_for(task, timeout=30)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()
            except Exception:
                log.exception("store service failed at stop", service=self.name)


class CommitLogFlusher:
    """Serialises CommitLog fsyncs and publishes the physic checkpoint timestamp."""

    def __init__(
        self,
        mfq: MappedFileQueue,
        checkpoint: StoreCheckpoint,
        run_blocking: RunBlocking,
        fault: StoreFault,
        release: WrittenPageReleaser | None = None,
        range_sync: RangeSync | None = None,
    ) -> None:
        """`range_sync`: flush only the range written since the last flush (store.range_sync), not every
        dirty page of the file (the pre-fault window ahead of the writer among them)."""
        self.mfq = mfq
        self.checkpoint = checkpoint
        self.run_blocking = run_blocking
        self.fault = fault
        self.release = release
        self.range_sync = range_sync
        self._lock = asyncio.Lock()
        self.flush_count = 0

    async def flush(self, least_pages: int) -> bool:
        async with self._lock:
            sync = self.range_sync.sync if self.range_sync is not None else None
            idle = await flush_queue(
                self.mfq, least_pages, self.run_blocking, self.fault.slow_fsync_ms, self.release, sync
            )
            if not idle:
                self.flush_count += 1
                if self.mfq.store_timestamp > 0:
                    self.checkpoint.physic_msg_timestamp = self.mfq.store_timestamp
            return idle

    @property
    def flushed_where(self) -> int:
        return self.mfq.flushed_where


class FlushRealTimeService(_Service):
    name = "FlushRealTimeService"

    def __init__(self, config: MessageStoreConfig, flusher: CommitLogFlusher, now_ms: Callable[[], int]) -> None:
        super().__init__()
        self.config = config
        self.flusher = flusher
        self.now_ms = now_ms
        self._last_thorough = 0

    async def run(self) -> None:
        while not self._stopped:
            cfg = self.config
            least = cfg.flush_commit_log_least_pages
            now = self.now_ms()
            if now >= self._last_thorough + cfg.flush_commit_log_thorough_interval:
                self._last_thorough = now
                least = 0
            # timed (upstream default): puts do not wake us; only stop() cuts the sleep short
            await self.wait_for_running(cfg.flush_interval_commit_log)
            begin = time.monotonic()
            await self.flusher.flush(least)
            past = (time.monotonic() - begin) * 1000
            if past > 500:
                log.info("Flush data to disk costs", ms=int(past))
        for _ in range(10):  # shutdown: everything must be on disk
            if await self.flusher.flush(0):
                break


class GroupCommitService(_Service):
    name = "GroupCommitService"

    def __init__(self, flusher: CommitLogFlusher) -> None:
        super().__init__()
        self.flusher = flusher
        self._requests: list[tuple[int, asyncio.Future[bool]]] = []

    def put_request(self, next_offset: int) -> asyncio.Future[bool]:
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self.flusher.flushed_where >= next_offset:
            fut.set_result(True)
            return fut
        self._requests.append((next_offset, fut))
        self.wakeup()
        return fut

    async def _do_commit(self) -> None:
        requests, self._requests = self._requests, []
        if requests:
            target = max(offset for offset, _ in requests)
            # the data may span into the next file: at most two rounds, like upstream
            for _ in range(2):
                if self.flusher.flushed_where >= target:
                    break
                await self.flusher.flush(0)
            flushed = self.flusher.flushed_where
            for offset, fut in requests:
                if not fut.done():
                    fut.set_result(flushed >= offset)
        elif self.flusher.mfq.remain_how_many_data_to_flush() > 0:
            # messages that do not wait (WAIT=false) still get flushed promptly
            await self.flusher.flush(0)

    async def run(self) -> None:
        while not self._stopped:
            await self.wait_for_running(10)
            await self._do_commit()
        await self._do_commit()
        for _ in range(10):
            if await self.flusher.flush(0):
                break


class CommitRealTimeService(_Service):
    name = "CommitRealTimeService"

    def __init__(
        self,
        config: MessageStoreConfig,
        mfq: MappedFileQueue,
        run_blocking: RunBlocking,
        now_ms: Callable[[], int],
        on_committed: Callable[[], None],
    ) -> None:
        super().__init__()
        self.config = config
        self.mfq = mfq
        self.run_blocking = run_blocking
        self.now_ms = now_ms
        self.on_committed = on_committed
        self._last_commit = 0
        self._lock = asyncio.Lock()

    async def commit(self, least_pages: int) -> int:
        """Copy pool bytes into the files; returns how many bytes were committed."""
        async with self._lock:
            targets = self.mfq.commit_targets(least_pages)
            self.mfq.apply_commit([])  # files written without a buffer advance directly
            if not targets:
                return 0
            held = [t for t in targets if t[0].hold()]
            try:
                await self.run_blocking(_commit_ranges, held)
            finally:
                for f, _, _ in held:
                    f.release()
            self.mfq.apply_commit(held)
        committed = sum(end - start for _, start, end in held)
        if committed:
            self.on_committed()  # readers (reput) and the flush may go further now
        return committed

    async def run(self) -> None:
        while not self._stopped:
            cfg = self.config
            least = cfg.commit_commit_log_least_pages
            now = self.now_ms()
            if now >= self._last_commit + cfg.commit_commit_log_thorough_interval:
                self._last_commit = now
                least = 0
            if await self.commit(least):
                self._last_commit = self.now_ms()
            await self.wait_for_running(cfg.commit_interval_commit_log)
        for _ in range(10):
            if not await self.commit(0):
                break


def _commit_ranges(targets: Iterable[tuple[MappedFile, int, int]]) -> None:
    for f, start, end in targets:
        f.commit_range(start, end)


class FlushConsumeQueueService(_Service):
    name = "FlushConsumeQueueService"

    def __init__(
        self,
        config: MessageStoreConfig,
        queues: Callable[[], Iterable[MappedFileQueue]],
        checkpoint: StoreCheckpoint,
        run_blocking: RunBlocking,
        now_ms: Callable[[], int],
        flush_index: Callable[[bool], object] | None = None,
        release: WrittenPageReleaser | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.queues = queues
        self.checkpoint = checkpoint
        self.run_blocking = run_blocking
        self.now_ms = now_ms
        self.flush_index = flush_index
        # consume queues are appended through their mapping too (20 bytes an entry): same release
        self.release = release
        self._last_thorough = 0

    async def do_flush(self, thorough: bool = False) -> None:
        cfg = self.config
        least = cfg.flush_consume_queue_least_pages
        logics_ts = 0
        now = self.now_ms()
        if thorough or now >= self._last_thorough + cfg.flush_consume_queue_thorough_interval:
            self._last_thorough = now
            least = 0
            logics_ts = self.checkpoint.logics_msg_timestamp
        # one worker-thread job for every consume queue with dirty pages, not one per queue
        plans = []
        for mfq in list(self.queues()):
            targets = mfq.flush_targets(least)
            if targets:
                plans.append((mfq, [(f, t) for f, t in targets if f.hold()]))
        if plans:
            try:
                await self.run_blocking(_fsync_files, [pair for _, held in plans for pair in held], 0, self.release)
            finally:
                for _, held in plans:
                    for f, _ in held:
                        f.release()
            for mfq, held in plans:
                mfq.apply_flush(held, 0)
        if self.flush_index is not None:  # (told whether this round is thorough: the index decides what it flushes)
            result = self.flush_index(least == 0)
            if asyncio.iscoroutine(result):
                await result
        if least == 0:
            if logics_ts > 0:
                self.checkpoint.logics_msg_timestamp = logics_ts
            self.checkpoint.write()
            await self.run_blocking(self.checkpoint.fsync)

    async def run(self) -> None:
        while not self._stopped:
            await self.wait_for_running(self.config.flush_interval_consume_queue)
            if self._stopped:
                break
            await self.do_flush()
        await self.do_flush(thorough=True)


class AfterPut:
    """Called by the put path after each append (upstream handleDiskFlush). With SYNC_FLUSH (unless the
    message says WAIT=false) it returns the wait for the group commit covering the put; otherwise it
    wakes the commit service (transient pool) or, unless flushes are timed, the flush service, and
    returns None: the put is done without awaiting anything (no coroutine per put)."""

    def __init__(self, config: MessageStoreConfig) -> None:
        self.config = config
        self._flush_service: FlushRealTimeService | GroupCommitService | None = None
        self._commit_service: CommitRealTimeService | None = None

    def bind(
        self,
        flush_service: FlushRealTimeService | GroupCommitService | None,
        commit_service: CommitRealTimeService | None,
    ) -> None:
        """The services of the running store (set at start)."""
        self._flush_service = flush_service
        self._commit_service = commit_service

    def __call__(
        self, result: AppendMessageResult, msg: MessageExtBrokerInner | None, topic: str
    ) -> Awaitable[PutMessageStatus] | None:
        cfg = self.config
        if cfg.flush_disk_type == FlushDiskType.SYNC_FLUSH:
            wait = msg is None or msg.properties.get(MessageConst.WAIT, "true").lower() != "false"
            service = self._flush_service
            if wait and isinstance(service, GroupCommitService):
                return self._wait_group_commit(service, result, topic)
            if service is not None:
                service.wakeup()
        elif self._commit_service is not None:
            self._commit_service.wakeup()
        elif self._flush_service is not None and not cfg.flush_commit_log_timed:
            self._flush_service.wakeup()
        return None

    async def _wait_group_commit(
        self, service: GroupCommitService, result: AppendMessageResult, topic: str
    ) -> PutMessageStatus:
        """FLUSH_DISK_TIMEOUT when the fsync covering the put did not come within syncFlushTimeout."""
        timeout_ms = self.config.sync_flush_timeout
        fut_flush = service.put_request(result.wrote_offset + result.wrote_bytes)
        try:
            ok = await asyncio.wait_for(asyncio.shield(fut_flush), timeout_ms / 1000)
        except TimeoutError:
            ok = False
        if ok:
            return PutMessageStatus.PUT_OK
        log.error(
            "do groupcommit, wait for flush failed", topic=topic, offset=result.wrote_offset, timeout_ms=timeout_ms
        )
        return PutMessageStatus.FLUSH_DISK_TIMEOUT
