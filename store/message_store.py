"""MessageStore: the store's public API (upstream DefaultMessageStore), wiring every part together.

Owns the lifecycle (load → recover → dispatch catch-up → start services → shutdown), the busy
signals and the runtime info. The other jobs have rooms of their own, which this class builds and wires
once: the put path (store/put_message.py), what a put does about durability once appended (AfterPut in
store/flush.py), the writer (store/commit_log.py), the dispatch to consume queues and index
(store/dispatcher.py, fed by the writer and by the reput, store/reput.py), the reads
(store/message_reader.py), recovery (store/recovery.py) and record parsing (store/record_parser.py).
Blocking work (file creation, fsync, commit into files, recovery scans) runs in the store's own worker
threads.

A little over 600 lines on purpose: about 130 of them are one-line delegates and properties that keep
the public API (`store.put_message`, `store.get_message`, `store.consume_queue_table`, ...) in one place.
"""

from __future__ import annotations

import asyncio
import functools
import mmap
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog

from store.checkpoint import StoreCheckpoint
from store.clean import CleanService, disk_used_ratio
from store.commit_log import CommitLog
from store.config import (
    BrokerRole,
    FlushDiskType,
    MessageStoreConfig,
    StoreConfigError,
)
from store.consume_queue import ConsumeQueue
from store.dispatcher import CommitLogDispatcher, MessageArrivingListener, RowsArrivingListener
from store.fault import StoreFault
from store.flush import (
    AfterPut,
    CommitLogFlusher,
    CommitRealTimeService,
    FlushConsumeQueueService,
    FlushRealTimeService,
    GroupCommitService,
    WrittenPageReleaser,
)
from store.index_service import IndexService
from store.mapped_file import MappedFile
from store.message import (
    MessageExt,
    MessageExtBrokerInner,
)
from store.message_reader import MessageReader, StoreNotReadableError
from store.predispatch import PreDispatch
from store.prefault import MADV_POPULATE_WRITE, Madvise, PrefaultService
from store.put_message import MessagePutter
from store.queue_manifest import QueueManifest
from store.range_sync import range_sync
from store.recovery import RecoveryReport, StoreRecovery
from store.reput import ReputMessageService
from store.results import (
    GetMessageResult,
    MessageFilter,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
)
from store.stats import StoreStats
from store.transient_store_pool import TransientStorePool
from store.write_behind import write_behind

log = structlog.get_logger(__name__)

_INT_MAX = 0x7FFFFFFF
_ACCEPTING: tuple[PutMessageStatus, str | None] = (PutMessageStatus.PUT_OK, None)


def _default_now_ms() -> int:
    return time.time_ns() // 1_000_000


class MessageStore:
    def __init__(
        self,
        config: MessageStoreConfig,
        *,
        now_ms: Callable[[], int] = _default_now_ms,
        clock: Callable[[], float] = time.monotonic,
        store_host: tuple[str, int] = ("127.0.0.1", 10911),
        io_threads: int = 4,
    ) -> None:
        config.validate()
        self.config = config
        self.now_ms = now_ms
        self.clock = clock
        self.store_host = store_host
        self.fault = StoreFault(now_ms)
        self._io_threads = io_threads
        self._executor: ThreadPoolExecutor | None = None
        self.pool: TransientStorePool | None = None
        if config.transient_store_pool_enable:
            self.pool = TransientStorePool(
                config.transient_store_pool_size, config.mapped_file_size_commit_log, drained=self.fault.pool_drained
            )
        self.commit_log = CommitLog(
            config,
            now_ms=now_ms,
            run_blocking=self._run_blocking,
            fault=self.fault,
            on_new_file=self._on_new_commit_log_file,
            unlink=self.unlink_later,
        )
        self.index_service = IndexService(config, run_blocking=self._run_blocking, now_ms=now_ms)
        self.stats = StoreStats(now_ms)
        self.dispatcher = CommitLogDispatcher(
            config,
            self.commit_log,
            self.index_service,
            run_blocking=self._run_blocking,
            unlink=self.unlink_later,
            queue_created=self._queue_created,
        )
        self.reader = MessageReader(
            config,
            self.commit_log,
            self.dispatcher,
            self.index_service,
            self.stats,
            functools.partial(getattr, self, "_loaded"),  # (a C call per read: a lambda's frame costs twice the time)
            now_ms,
        )
        # every pull's read, twice per caught-up consumer's message: the reader's own method, no wrapper's frame
        self.get_message = self.reader.get_message
        self.get_woken_one = self.reader.get_woken_one  # (a caught-up consumer's woken pull: the same, no frame)
        self.reput = ReputMessageService(self.commit_log, self.dispatcher, self._run_blocking)
        self.reput.with_keys = config.message_index_enable
        self.dispatcher.bind_reput(self.reput)
        self._after_put = AfterPut(config)  # bound to the flush or commit service at start
        self.putter = MessagePutter(
            config,
            self.commit_log,
            self.dispatcher,
            self.reput,
            self.stats,
            now_ms,
            pooled=self.pool is not None,
            store_status=self._check_store_status,
            after_put=self._after_put,
        )
        self.commit_log.bind_dispatcher(self.dispatcher)
        self.commit_log.parser.want_raw_props = lambda: (
            self.dispatcher.message_arriving_listener is not None and self.dispatcher.running
        )
        self._flusher: CommitLogFlusher | None = None
        self._flush_service: FlushRealTimeService | GroupCommitService | None = None
        self._commit_service: CommitRealTimeService | None = None
        self._prefault: PrefaultService | None = None
        self._flush_cq_service: FlushConsumeQueueService | None = None
        self._clean_service: CleanService | None = None
        self._loaded = False
        self._running = False
        self._shutdown = True
        self._disk_full = False
        self._lock_fd: int | None = None
        self.manifest = QueueManifest(config.queue_manifest_file, self._run_blocking)
        self.recovery = StoreRecovery(
            config, self.commit_log, self.dispatcher, self.index_service, self.reput, self.manifest, io_threads
        )

    # ------------------------------------------------------------------------------------ threading
    def _get_executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self._io_threads, thread_name_prefix="store-io")
        return self._executor

    def io_executor(self) -> tuple[ThreadPoolExecutor, int]:
        """The store's worker pool and its size, for a warm-up that starts its threads off the loop."""
        return self._get_executor(), self._io_threads

    def _run_blocking(self, fn: Callable[..., Any], *args: Any) -> asyncio.Future:
        return asyncio.get_running_loop().run_in_executor(self._get_executor(), fn, *args)

    def unlink_later(self, path: str) -> None:
        """Unlink in a worker thread when the loop runs (retention), else right away."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            _unlink_quietly(path)
            return
        fut = self._run_blocking(_unlink_quietly, path)
        fut.add_done_callback(_log_unlink_failure)

    def _on_new_commit_log_file(self, mf: MappedFile) -> None:
        if self.pool is not None:
            buf = self.pool.borrow_buffer()
            if buf is not None:
                mf.attach_write_buffer(buf, self.pool)

    # ------------------------------------------------------------------------------------ lifecycle
    async def load(self) -> bool:
        """Load files and recover (normally after a clean stop, abnormally after a crash), then dispatch
        whatever the consume queues and index do not hold yet. False if the store cannot start."""
        last_exit_ok = not os.path.exists(self.config.abort_file)
        log.info("last shutdown", normally=last_exit_ok, root=self.config.store_path_root_dir)
        try:
            if self.pool is not None:
                await self._run_blocking(self.pool.init)
            pre = PreDispatch(
                self.commit_log,
                self._get_executor(),
                self.dispatcher.dispatch_many,
                self._pre_dispatched,
                self.dispatcher.end_round,
                with_keys=self.config.message_index_enable,
            )
            try:
                scanned = await self._run_blocking(self._load_blocking, last_exit_ok, pre)
            finally:
                self.commit_log.recovery.on_verified = None
                await pre.finish()
            await self._run_blocking(self.recovery.recover_finish, last_exit_ok, *scanned, pre.dispatched)
            await self.reput.catch_up()
            self.commit_log.recovery.recovered_positions.clear()
            self.recovery.recover_topic_queue_table()
        except (OSError, ValueError) as exc:
            log.error("message store load failed", error=str(exc))
            return False
        self._loaded = True
        return True

    def _load_blocking(self, last_exit_ok: bool, pre: PreDispatch) -> tuple[RecoveryReport, int, float]:
        os.makedirs(self.config.store_path_root_dir, exist_ok=True)
        self._acquire_lock_file()
        self.commit_log.load()
        self.recovery.load_consume_queues()
        self.checkpoint = StoreCheckpoint(self.config.store_checkpoint)
        self.index_service.load(last_exit_ok, self.checkpoint)
        return self.recovery.recover_scan(last_exit_ok, pre)

    def _pre_dispatched(self, end: int, n: int) -> None:
        self.reput.reput_from_offset = end
        self.reput.dispatched_total += n

    def _acquire_lock_file(self) -> None:
        import fcntl

        fd = os.open(self.config.lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise OSError(f"Lock failed, MQ already started: another process holds {self.config.lock_file}") from None
        os.ftruncate(fd, 0)
        os.write(fd, b"lock")
        self._lock_fd = fd

    def _queue_created(self, topic: str, queue_id: int) -> None:
        """A consume queue created on first use: the manifest lists it (written in the background)."""
        if self.manifest.add(topic, queue_id) and self._running:
            asyncio.get_running_loop().create_task(self.manifest.save())

    @property
    def last_recovery(self) -> dict[str, Any]:
        """What the last load recovered (processOffset, droppedBytes, seconds, ...), for admin and tests."""
        return self.recovery.last_recovery

    # --------------------------------------------------------------------- the dispatcher's table and state
    @property
    def consume_queue_table(self) -> dict[str, dict[int, ConsumeQueue]]:
        return self.dispatcher.consume_queue_table

    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, created on first use (CommitLogDispatcher.find_consume_queue)."""
        return self.dispatcher.find_consume_queue(topic, queue_id)

    def _all_consume_queues(self) -> Iterable[ConsumeQueue]:
        return self.dispatcher.all_consume_queues()

    @property
    def message_arriving_listener(self) -> MessageArrivingListener | None:
        return self.dispatcher.message_arriving_listener

    @message_arriving_listener.setter
    def message_arriving_listener(self, listener: MessageArrivingListener | None) -> None:
        self.dispatcher.message_arriving_listener = listener

    @property
    def rows_arriving_listener(self) -> RowsArrivingListener | None:
        return self.dispatcher.rows_arriving_listener

    @rows_arriving_listener.setter
    def rows_arriving_listener(self, listener: RowsArrivingListener | None) -> None:
        """The arrivals of a group of rows the SEND path's one pass stored, in one call (`CommitLogDispatcher.
        announce_rows`); without it each is told to `message_arriving_listener`."""
        self.dispatcher.rows_arriving_listener = listener

    @property
    def checkpoint(self) -> StoreCheckpoint | None:
        return self.dispatcher.checkpoint

    @checkpoint.setter
    def checkpoint(self, checkpoint: StoreCheckpoint | None) -> None:
        self.dispatcher.checkpoint = checkpoint

    @property
    def _running(self) -> bool:
        return self.dispatcher.running

    @_running.setter
    def _running(self, running: bool) -> None:
        self.dispatcher.running = running

    async def start(self) -> None:
        if not self._loaded:
            raise RuntimeError("MessageStore.load() must succeed before start()")
        assert self.checkpoint is not None
        cfg = self.config
        # a crash from now on must be recovered abnormally
        self.checkpoint.clean_max_offset = -1
        self.checkpoint.write()
        await self._run_blocking(self._mark_running_blocking)
        self._flusher = CommitLogFlusher(
            self.commit_log.mapped_file_queue,
            self.checkpoint,
            self._run_blocking,
            self.fault,
            self._page_releaser(),
            range_sync(),
        )
        if cfg.flush_disk_type == FlushDiskType.SYNC_FLUSH:
            self._flush_service = GroupCommitService(self._flusher)
        else:
            self._flush_service = FlushRealTimeService(cfg, self._flusher, self.now_ms)
        if self.pool is not None:
            self._commit_service = CommitRealTimeService(
                cfg, self.commit_log.mapped_file_queue, self._run_blocking, self.now_ms, self._on_committed
            )
        self._after_put.bind(self._flush_service, self._commit_service)
        self._flush_cq_service = FlushConsumeQueueService(
            cfg,
            self.dispatcher.consume_queue_files,
            self.checkpoint,
            self._run_blocking,
            self.now_ms,
            flush_index=self._flush_index,
            release=self._flusher.release,
        )
        self._clean_service = CleanService(self)
        self._start_prefault()
        self.commit_log.start()
        self._flush_service.start()
        if self._commit_service is not None:
            self._commit_service.start()
        self._flush_cq_service.start()
        self._clean_service.start()
        self.stats.start()
        if self.manifest.dirty:
            await self.manifest.save()
        self._shutdown = False
        self._running = True
        # the first CommitLog file (if none) and the next one are created now, in worker threads, so
        # the first put does not wait for a 1 GiB file to be allocated and warmed
        mfq = self.commit_log.mapped_file_queue
        if mfq.last_mapped_file() is None:
            try:
                await mfq.get_last_mapped_file_async(0)
            except OSError as exc:
                log.error("cannot create the first CommitLog file", error=str(exc))
        elif not mfq.last_mapped_file().is_full():
            mfq.allocate_ahead()

    @staticmethod
    def _page_releaser() -> WrittenPageReleaser | None:
        try:
            return WrittenPageReleaser(Madvise(mmap.MADV_DONTNEED))
        except (OSError, AttributeError) as exc:
            log.warning("flushed CommitLog pages stay mapped: no madvise", error=str(exc))
            return None

    def _start_prefault(self) -> None:
        """Pre-fault ahead of the CommitLog writer: only useful for sparse files written through the
        mapping (a pool buffer takes the writes; preallocated or warmed files do not fault)."""
        cfg = self.config
        if cfg.prefault_ahead_bytes <= 0 or self.pool is not None:
            return
        if cfg.preallocate_mapped_file or cfg.warm_mapped_file_enable:
            return
        try:
            populator = Madvise(MADV_POPULATE_WRITE)
        except (OSError, AttributeError) as exc:
            log.warning("commit log pre-faulting disabled: no madvise", error=str(exc))
            return
        mfq = self.commit_log.mapped_file_queue
        behind = write_behind(mfq) if cfg.commit_log_write_behind else None
        svc = PrefaultService(mfq, cfg.prefault_ahead_bytes, populator=populator, write_behind=behind)
        self._prefault = svc
        self.commit_log.prefault = svc
        self.commit_log.mapped_file_queue.on_created_blocking = svc.prefault_new_file
        svc.start()

    async def _stop_prefault(self) -> None:
        svc, self._prefault = self._prefault, None
        if svc is not None:
            self.commit_log.prefault = None
            self.commit_log.mapped_file_queue.on_created_blocking = None
            await svc.stop()

    def _mark_running_blocking(self) -> None:
        with open(self.config.abort_file, "w"):
            pass
        assert self.checkpoint is not None
        self.checkpoint.fsync()

    async def shutdown(self) -> None:
        """Stop accepting puts, drain the writer, dispatch, flush everything, write the checkpoint and
        delete the abort file (a clean stop)."""
        if self._shutdown and not self._running:
            await self._close_files()
            return
        self._shutdown = True
        self._running = False
        await self.commit_log.stop()
        await self._stop_prefault()
        if self._clean_service is not None:
            await self._clean_service.stop()
        await self.stats.stop()
        if self._commit_service is not None:
            await self._commit_service.stop()
        await self.reput.drain()
        if self._flush_service is not None:
            await self._flush_service.stop()
        if self._flusher is not None:
            await self._flusher.flush(0)
        if self._flush_cq_service is not None:
            await self._flush_cq_service.stop()
        self.dispatcher.cancel_index_build()
        pending = self.dispatcher.end_round()  # the keys of the last inline appends (a new file if full)
        if pending is not None:
            await pending
        await self.index_service.flush_all()
        self.reput.close()
        clean = self.reput.behind() == 0 and not self._disk_full
        if self.checkpoint is not None:
            if clean:
                self.checkpoint.clean_max_offset = self.commit_log.get_max_offset()
            self.checkpoint.write()
            await self._run_blocking(self.checkpoint.fsync)
        self.manifest.dirty = True
        await self.manifest.save()
        if clean:
            await self._run_blocking(_unlink_quietly, self.config.abort_file)
        else:
            log.warning("the store may be wrong, so shutdown abnormally, and keep abort file")
        await self._close_files()

    async def _close_files(self) -> None:
        self.commit_log.shutdown()
        for cq in self._all_consume_queues():
            cq.shutdown()
        self.index_service.shutdown()
        if self.checkpoint is not None:
            self.checkpoint.close()
            self.checkpoint = None
        if self.pool is not None:
            self.pool.destroy()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self._loaded = False

    def destroy(self) -> None:
        """Delete every file of the store (tests, admin)."""
        for cq in self._all_consume_queues():
            cq.destroy()
        self.consume_queue_table.clear()
        self.commit_log.destroy()
        self.index_service.destroy()
        for path in (self.config.abort_file, self.config.store_checkpoint, self.config.queue_manifest_file):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    # ----------------------------------------------------------------------------------- busy signals
    def is_os_page_cache_busy(self) -> bool:
        begin = self.commit_log.begin_time_in_lock
        if begin <= 0:
            return False  # no append section open (the common case: no clock read)
        diff = self.now_ms() - begin
        return diff < 10_000_000 and diff > self.config.os_page_cache_busy_timeout_mills

    def lock_time_mills(self) -> int:
        return self.commit_log.lock_time_mills()

    def remain_transient_store_buffer_numbs(self) -> int:
        if self.pool is None:
            return _INT_MAX  # upstream: Integer.MAX_VALUE when the pool is disabled
        return self.pool.available_buffer_nums()

    def is_transient_store_pool_deficient(self) -> bool:
        return self.remain_transient_store_buffer_numbs() == 0

    def is_busy_or_deficient(self) -> bool:
        """`is_os_page_cache_busy() or is_transient_store_pool_deficient()` in one call: the send processor asks
        it once per request, and the common answer (no append section open, no transient pool) is two
        attribute tests."""
        if self.commit_log.begin_time_in_lock <= 0 and self.pool is None:
            return False
        return self.is_os_page_cache_busy() or self.is_transient_store_pool_deficient()

    # -------------------------------------------------------------------------------------------- put
    def _check_store_status(self) -> tuple[PutMessageStatus, str | None]:
        if self._shutdown or self._disk_full or self.commit_log.begin_time_in_lock:
            return self._store_status_refusal()
        if self.config.broker_role == BrokerRole.SLAVE:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "broker role is slave, so putMessage is forbidden"
        return _ACCEPTING

    def _store_status_refusal(self) -> tuple[PutMessageStatus, str | None]:
        if self._shutdown:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store has shutdown"
        if self.config.broker_role == BrokerRole.SLAVE:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "broker role is slave, so putMessage is forbidden"
        if self._disk_full:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "the message store is not writable: the disk is full"
        if self.is_os_page_cache_busy():
            return PutMessageStatus.OS_PAGECACHE_BUSY, "os page cache busy"
        return _ACCEPTING

    def put_message(self, msg: MessageExtBrokerInner, *, stall_append_ms: int = 0) -> Awaitable[PutMessageResult]:
        """Append one message; with SYNC_FLUSH wait until an fsync covers it (MessagePutter.put_message).
        (A plain method handing back the putter's coroutine: one coroutine per put, not two.)"""
        return self.putter.put_message(msg, stall_append_ms=stall_append_ms)

    def put_messages(
        self, msgs: list[MessageExtBrokerInner], *, stall_append_ms: int = 0
    ) -> Awaitable[PutMessageResult]:
        """Append a batch of one topic and queue (MessagePutter.put_messages)."""
        return self.putter.put_messages(msgs, stall_append_ms=stall_append_ms)

    def put_message_group(
        self, msgs: list[MessageExtBrokerInner], *, stall_append_ms: int = 0
    ) -> Awaitable[list[PutMessageResult]]:
        """Put each message as `put_message` would, in one pass (MessagePutter.put_message_group)."""
        return self.putter.put_message_group(msgs, stall_append_ms=stall_append_ms)

    def put_sent_group(self, items: list, born_host: tuple[str, int], store_host: tuple[str, int]) -> Awaitable[list]:
        """`put_message_group` for the SEND path's rows (`store.send_rows.SendRow`, all born at `born_host` and
        stored by `store_host`; messages may be mixed in): the common record planned, written and dispatched in one
        pass, a stored row's result a `(msg_id, queue_offset, size)` tuple; anything else goes through
        `put_message_group`, its row replaced in `items` by the message put (SendRowPut.put)."""
        rows = self.putter.send_rows
        if len(items) == 1 and items[0].__class__ is tuple:  # a lone send's row: put's one pass, straight-line
            return rows.put_one(items, born_host, store_host)
        return rows.put(items, born_host, store_host)

    def put_sent_group_now(
        self, items: list, born_host: tuple[str, int], store_host: tuple[str, int]
    ) -> list | Awaitable[list]:
        """`put_sent_group` on the caller's stack as far as it goes: the results when every row was stored in the one
        pass without a wait (SendRowPut.put_one_now for a lone row, put_now for a group), else an awaitable of them.
        For the send processor's synchronous entries, whose caller (a read's callback) returns to the event loop after
        it: not a put "in a row" (no every-64th yield)."""
        rows = self.putter.send_rows
        if len(items) == 1 and items[0].__class__ is tuple:
            return rows.put_one_now(items, born_host, store_host, False)
        return rows.put_now(items, born_host, store_host, False)

    def _on_committed(self) -> None:
        self.reput.wakeup()
        if self._flush_service is not None:
            self._flush_service.wakeup()

    async def _flush_index(self, thorough: bool) -> None:
        """The consume-queue flush's part for the index: the current index file is made durable on the thorough
        rounds (`flushConsumeQueueThoroughInterval`, 60 s by default), on every round only with `messageIndexSafe`
        (whose crash recovery starts from the index's checkpoint time, so it must stay recent).

        Upstream flushes an index file only when it is full and at shutdown. A round's fdatasync would write back
        every slot page the sends since the last one touched (the slots are hashed, so at a few thousand keys a
        second that is most of the 20 MB slot table, every second), and each page written back is write-protected
        again: the next key hashed to it takes a page fault on the event loop. A full file is still flushed when the next one is made, and shutdown flushes
        them all."""
        if not (thorough or self.config.message_index_safe):
            return
        self.dispatcher.build_index_keys()
        await self.index_service.flush(self.checkpoint)

    # ------------------------------------------------------------------------- reads (store/message_reader.py)
    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult:
        """Up to `max_msg_nums` raw records from `offset` (MessageReader.get_message)."""
        return self.reader.get_message(group, topic, queue_id, offset, max_msg_nums, message_filter)

    def get_woken_one(
        self, group: str, topic: str, queue_id: int, offset: int, max_msg_nums: int
    ) -> tuple[memoryview, int] | GetMessageResult:
        """A match-everything read of one arrived message, or `get_message`'s result (MessageReader.get_woken_one)."""
        return self.reader.get_woken_one(group, topic, queue_id, offset, max_msg_nums)

    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reader.get_max_offset_in_queue(topic, queue_id)

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reader.get_min_offset_in_queue(topic, queue_id)

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        return self.reader.get_commit_log_offset_in_queue(topic, queue_id, cq_offset)

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, ts_ms: int) -> int:
        return self.reader.get_offset_in_queue_by_time(topic, queue_id, ts_ms)

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        return self.reader.get_earliest_message_time(topic, queue_id)

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        return self.reader.get_message_store_timestamp(topic, queue_id, cq_offset)

    def get_message_total_in_queue(self, topic: str, queue_id: int) -> int:
        return self.reader.get_message_total_in_queue(topic, queue_id)

    def look_message_by_offset(self, phy_offset: int) -> MessageExt | None:
        return self.reader.look_message_by_offset(phy_offset)

    def select_one_message_by_offset(self, phy_offset: int) -> memoryview | None:
        return self.reader.select_one_message_by_offset(phy_offset)

    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> QueryMessageResult:
        return self.reader.query_message(topic, key, max_num, begin_ms, end_ms)

    def get_max_phy_offset(self) -> int:
        return self.commit_log.get_max_offset()

    def get_min_phy_offset(self) -> int:
        return self.commit_log.get_min_offset()

    def dispatch_behind_bytes(self) -> int:
        return self.reput.behind()

    # ----------------------------------------------------------------------------------------- admin
    def delete_topics(self, topics: Iterable[str]) -> int:
        """Drop the consume queues of these topics (the CommitLog keeps the bytes until retention)."""
        deleted = 0
        for topic in topics:
            queues = self.consume_queue_table.pop(topic, None)
            if not queues:
                continue
            for qid, cq in queues.items():
                cq.destroy()
                self.commit_log.topic_queue_table.pop((topic, qid), None)
                self.manifest.discard(topic, qid)
                deleted += 1
            log.info("delete topic consume queues", topic=topic, queues=len(queues))
        if deleted and self._running:
            asyncio.get_running_loop().create_task(self.manifest.save())
        return deleted

    def execute_delete_files_manually(self) -> None:
        if self._clean_service is not None:
            self._clean_service.execute_delete_files_manually()

    def runtime_info(self) -> dict[str, str]:
        cl = self.commit_log
        info = self.stats.runtime_info()
        cl_path = self.config.store_path_commit_log or ""
        info["commitLogDiskRatio"] = str(disk_used_ratio(cl_path))
        info[f"commitLogDiskRatio_{cl_path}"] = info["commitLogDiskRatio"]
        info["consumeQueueDiskRatio"] = str(disk_used_ratio(self.config.store_path_consume_queue))
        info["commitLogMinOffset"] = str(cl.get_min_offset())
        info["commitLogMaxOffset"] = str(cl.get_max_offset())
        info["putMessageTimesTotal"] = str(max(1, cl.put_message_times_total))
        info["putMessageSizeTotal"] = str(cl.put_message_size_total)
        info["putMessageAverageSize"] = str(cl.put_message_size_total / max(1, cl.put_message_times_total))
        info["remainTransientStoreBufferNumbs"] = str(self.remain_transient_store_buffer_numbs())
        info["pageCacheLockTimeMills"] = str(self.lock_time_mills())
        info["putMessageLockTimeMax"] = str(cl.lock_time_max_ms)
        info["dispatchBehindBytes"] = str(self.dispatch_behind_bytes())
        info["remainHowManyDataToCommit"] = str(cl.mapped_file_queue.remain_how_many_data_to_commit())
        info["remainHowManyDataToFlush"] = str(cl.mapped_file_queue.remain_how_many_data_to_flush())
        info["commitLogFlushedOffset"] = str(cl.mapped_file_queue.flushed_where)
        info["transientStorePoolLocked"] = str(bool(self.pool and self.pool.locked)).lower()
        info["osPageCacheBusy"] = str(self.is_os_page_cache_busy()).lower()
        return info


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _log_unlink_failure(fut: asyncio.Future) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        log.error("cannot delete an expired file", error=str(fut.exception()))


__all__ = ["MessageStore", "StoreConfigError", "StoreNotReadableError"]
