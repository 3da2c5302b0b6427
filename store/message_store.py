"""MessageStore: the store's public API (upstream DefaultMessageStore), wiring every part together.

Owns the lifecycle (load → recover → dispatch catch-up → start services → shutdown), the put path
(checks, delayed-message rewrite, encode outside the lock, hand to the single CommitLog writer, wait for
the flush when SYNC_FLUSH), the pull path (`get_message` with upstream's status and nextBeginOffset
rules), offset queries, index queries and the runtime info. Blocking work (file creation, fsync, commit
into files, recovery scans) runs in the store's own worker threads.
"""

from __future__ import annotations

import asyncio
import json
import mmap
import os
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import structlog

from store.checkpoint import StoreCheckpoint
from store.clean import CleanService, disk_used_ratio
from store.commit_log import (
    AppendFailure,
    AppendRequest,
    CommitLog,
    DispatchBatch,
    DispatchRequest,
    ParsedRecords,
    RecoveryReport,
)
from store.config import (
    CQ_STORE_UNIT_SIZE,
    BrokerRole,
    FlushDiskType,
    MessageStoreConfig,
    StoreConfigError,
)
from store.consume_queue import ConsumeQueue, tags_to_int32
from store.fault import StoreFault
from store.flush import (
    CommitLogFlusher,
    CommitRealTimeService,
    FlushConsumeQueueService,
    FlushRealTimeService,
    GroupCommitService,
    WrittenPageReleaser,
)
from store.index_service import IndexService, index_keys
from store.mapped_file import MappedFile
from store.message import (
    MAX_TOPIC_LENGTH,
    MESSAGE_MAGIC_CODE,
    RMQ_SYS_SCHEDULE_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    MessageConst,
    MessageExt,
    MessageExtBrokerInner,
    RecordError,
    decode_properties,
    decode_record,
    encode_properties,
    transaction_value,
)
from store.path_guard import UnsafeStorePath, unsafe_dir_name_reason
from store.predispatch import PreDispatch
from store.prefault import MADV_POPULATE_WRITE, Madvise, PrefaultService
from store.reput import ReputMessageService
from store.results import (
    AppendMessageResult,
    GetMessageResult,
    GetMessageStatus,
    MessageFilter,
    PutMessageResult,
    PutMessageStatus,
    QueryMessageResult,
)
from store.stats import StoreStats
from store.transient_store_pool import TransientStorePool

log = structlog.get_logger(__name__)

MessageArrivingListener = Callable[[str, int, int, int, int, dict | None], None]

_INT_MAX = 0x7FFFFFFF
_YIELD_EVERY_INLINE = 64  # appends done on the caller's stack in a row before a put yields to the loop
# keys of inline appends are indexed in one vectorised pass (hashing costs ~0.8 us a key in passes of 32,
# ~0.2 us in passes of 1000): at most this long after the put, or at once when this many are waiting.
# Upstream's reput indexes behind the writer too; a QUERY_MESSAGE builds what is waiting first.
_INDEX_BUILD_DELAY_S = 0.005
_INDEX_BUILD_BATCH = 4096


def _default_now_ms() -> int:
    return time.time_ns() // 1_000_000


class StoreNotReadableError(RuntimeError):
    """A read on a store that is not loaded (or already shut down)."""


def _total_physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 * 1024**3


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
        self.message_arriving_listener: MessageArrivingListener | None = None
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
        self.consume_queue_table: dict[str, dict[int, ConsumeQueue]] = {}
        self._dispatch_failures: set[tuple[str, int]] = set()  # queues already reported by _dispatch_failed
        self._unwritable_queues: set[tuple[str, int]] = set()  # whose next file could not be created
        self.index_service = IndexService(config, run_blocking=self._run_blocking, now_ms=now_ms)
        self.checkpoint: StoreCheckpoint | None = None
        self._encoder = self.commit_log.encoder
        self._index_enabled = config.message_index_enable
        # index keys dispatched but not yet written: built in one vectorised pass per dispatch round
        self._index_keys: list[str] = []
        self._index_phys: list[int] = []
        self._index_times: list[int] = []
        # the pending bulk index build of inline appends' keys (None: none scheduled)
        self._index_build_handle: asyncio.TimerHandle | None = None
        self._inline_appends = 0
        self.reput = ReputMessageService(
            self.commit_log,
            self._dispatch,
            self._prepare_dispatch,
            self._end_dispatch_round,
            self._dispatch_many,
            self._dispatch_described_batch,
            self._run_blocking,
        )
        self.commit_log.post_append = self._after_append
        self.reput.with_keys = config.message_index_enable
        self.commit_log.inline_dispatch = self._dispatch_appended
        self.commit_log.want_raw_props = lambda: self.message_arriving_listener is not None and self._running
        self.stats = StoreStats(now_ms)
        self._total_memory = _total_physical_memory()
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
        self._manifest: set[tuple[str, int]] = set()
        self._manifest_dirty = False
        self._manifest_lock = asyncio.Lock()
        self.last_recovery: dict[str, Any] = {}

    # ------------------------------------------------------------------------------------ threading
    def _get_executor(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self._io_threads, thread_name_prefix="store-io")
        return self._executor

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
                self._dispatch_many,
                self._pre_dispatched,
                self._end_dispatch_round,
                with_keys=self.config.message_index_enable,
            )
            try:
                scanned = await self._run_blocking(self._load_blocking, last_exit_ok, pre)
            finally:
                self.commit_log.on_verified = None
                await pre.finish()
            await self._run_blocking(self._recover_finish, last_exit_ok, *scanned, pre.dispatched)
            await self.reput.catch_up()
            self.commit_log.recovered_positions.clear()
            self._recover_topic_queue_table()
        except (OSError, ValueError) as exc:
            log.error("message store load failed", error=str(exc))
            return False
        self._loaded = True
        return True

    def _load_blocking(self, last_exit_ok: bool, pre: PreDispatch) -> tuple[RecoveryReport, int, float]:
        os.makedirs(self.config.store_path_root_dir, exist_ok=True)
        self._acquire_lock_file()
        self.commit_log.load()
        self._load_consume_queues()
        self.checkpoint = StoreCheckpoint(self.config.store_checkpoint)
        self.index_service.load(last_exit_ok, self.checkpoint)
        return self._recover_scan(last_exit_ok, pre)

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
            raise OSError(
                f"Lock failed, MQ already started: another process holds {self.config.lock_file}"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, b"lock")
        self._lock_fd = fd

    def _load_consume_queues(self) -> None:
        root = self.config.store_path_consume_queue
        if os.path.isdir(root):
            for topic in sorted(os.listdir(root)):
                tdir = os.path.join(root, topic)
                if not os.path.isdir(tdir):
                    continue
                try:
                    qids = sorted(os.listdir(tdir))
                except OSError as exc:  # an unreadable topic folder: set it aside like a bad queue
                    self._set_aside(tdir, None, exc)
                    continue
                for qid in qids:
                    if not qid.lstrip("-").isdigit():
                        continue
                    cq = None
                    try:
                        cq = self._new_consume_queue(topic, int(qid))
                        cq.load()
                    except (OSError, ValueError) as exc:
                        self._set_aside(os.path.join(tdir, qid), cq, exc)
                        continue
                    self.consume_queue_table.setdefault(topic, {})[int(qid)] = cq
        self._manifest = self._read_manifest()

    def _set_aside(self, qdir: str, cq: ConsumeQueue | None, exc: BaseException) -> None:
        """A queue folder that cannot be loaded or recovered must not stop the boot: close what was mapped and
        move the folder to ``consumequeue-set-aside/`` (inside the store). The manifest still lists the queue,
        so the reput rebuilds it from the CommitLog."""
        if cq is not None:
            try:
                cq.shutdown()
            except Exception:  # noqa: BLE001 - half-loaded: closing is best effort
                pass
        aside_root = os.path.join(self.config.store_path_root_dir, "consumequeue-set-aside")
        queue = os.path.relpath(qdir, self.config.store_path_consume_queue)
        target = os.path.join(aside_root, f"{queue.replace(os.sep, '.')}.{int(time.time() * 1000)}")
        try:
            os.makedirs(aside_root, exist_ok=True)
            os.rename(qdir, target)
        except OSError as move_error:
            target = f"not moved ({move_error})"
        log.error("consume queue folder set aside, it will be rebuilt from the CommitLog", queue=queue,
                  error=f"{type(exc).__name__}: {exc}", moved_to=target)

    def _read_manifest(self) -> set[tuple[str, int]]:
        try:
            with open(self.config.queue_manifest_file, "rb") as f:
                data = json.load(f)
            return {(t, int(q)) for t, qs in data.get("queues", {}).items() for q in qs}
        except (OSError, ValueError, AttributeError, TypeError):
            return set()

    def _write_manifest_blocking(self, queues: set[tuple[str, int]]) -> None:
        table: dict[str, list[int]] = {}
        for t, q in sorted(queues):
            table.setdefault(t, []).append(q)
        path = self.config.queue_manifest_file
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"queues": table}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _new_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        return ConsumeQueue(
            topic,
            queue_id,
            self.config.store_path_consume_queue,
            self.config.mapped_file_size_consume_queue,
            run_blocking=self._run_blocking,
            unlink=self.unlink_later,
        )

    def _recover_scan(self, last_exit_ok: bool, pre: PreDispatch) -> tuple[RecoveryReport, int, float]:
        """Recover the consume queues, then verify the CommitLog (all of it that may be torn) while `pre`
        dispatches what the scan accepted from where the dispatch must start. Blocking (a worker)."""
        assert self.checkpoint is not None
        begin = time.monotonic()
        max_phy_of_cq = -1
        for cq in list(self._all_consume_queues()):
            try:
                cq.recover()
            except (OSError, ValueError) as exc:
                self.consume_queue_table.get(cq.topic, {}).pop(cq.queue_id, None)
                self._set_aside(cq.queue_dir, cq, exc)
                continue
            max_phy_of_cq = max(max_phy_of_cq, cq.max_physic_offset)
        # (the parses run on the other worker threads: with one, they would wait behind this scan)
        if self.commit_log.mapped_file_queue.mapped_files and self._io_threads >= 2:
            pre.arm(self._dispatch_start(quiet=True))
            self.commit_log.on_verified = pre.on_verified
        try:
            return self._scan_commit_log(last_exit_ok), max_phy_of_cq, begin
        finally:
            self.commit_log.on_verified = None

    def _scan_commit_log(self, last_exit_ok: bool) -> RecoveryReport:
        assert self.checkpoint is not None
        if last_exit_ok:
            report = self.commit_log.recover_normally(self.checkpoint.clean_max_offset)
        else:
            min_ts = (
                self.checkpoint.min_timestamp_index()
                if self.config.message_index_enable and self.config.message_index_safe
                else self.checkpoint.min_timestamp()
            )
            report = self.commit_log.recover_abnormally(min_ts)
        return report

    def _dispatch_start(self, quiet: bool = False) -> int:
        """Where the dispatch (re)starts: where the consume queues end (upstream start()), the start
        of the CommitLog for a queue the manifest knows but whose files are gone, or for an index to
        rebuild."""
        cl_min = max(self.commit_log.get_min_offset(), 0)
        reput_from = max(cl_min, max(cq.max_physic_offset for cq in self._all_consume_queues()) if self.consume_queue_table else cl_min)
        missing = [
            (t, q)
            for t, q in self._manifest
            if (cq := self.consume_queue_table.get(t, {}).get(q)) is None or cq.max_physic_offset < 0
        ]
        if missing:
            if not quiet:
                log.warning("consume queues missing, rebuilding them from the CommitLog", queues=len(missing))
            reput_from = cl_min
        reput_from = min(reput_from, self.commit_log.get_max_offset())
        index_from = self.index_service.rebuild_from()
        if self.config.message_index_enable and 0 <= index_from < reput_from:
            reput_from = max(cl_min, index_from)
        return reput_from

    def _recover_finish(
        self, last_exit_ok: bool, report: RecoveryReport, max_phy_of_cq: int, begin: float, pre_dispatched: int
    ) -> None:
        """After the scan (and the pre-dispatch) returned: cut consume queues and index back to what the
        CommitLog holds, and place the reput. Blocking (a worker)."""
        process_offset = report.process_offset
        if not self.commit_log.mapped_file_queue.mapped_files:
            if self.consume_queue_table:
                log.warning("the commitlog files are deleted, and delete the consume queue files")
            for cq in self._all_consume_queues():
                cq.destroy()
            self.consume_queue_table.clear()
        elif max_phy_of_cq > process_offset:
            log.warning(
                "maxPhyOffsetOfConsumeQueue >= processOffset, truncate dirty logic files",
                max_phy_of_cq=max_phy_of_cq,
                process_offset=process_offset,
            )
            for cq in self._all_consume_queues():
                cq.truncate_dirty_logic_files(process_offset)
        self.index_service.truncate_beyond(process_offset)
        reput_from = self._dispatch_start()
        self.reput.reput_from_offset = reput_from
        elapsed = time.monotonic() - begin
        self.last_recovery = {
            "normal": last_exit_ok,
            "processOffset": process_offset,
            "droppedBytes": report.dropped_bytes,
            "scannedBytes": report.scanned_bytes,
            "records": report.records,
            "startFile": report.start_file,
            "reputFrom": reput_from,
            "preDispatched": pre_dispatched,
            "seconds": round(elapsed, 3),
        }
        log.info(
            "store recovered",
            normally=last_exit_ok,
            commit_log_max_offset=process_offset,
            dropped_bytes=report.dropped_bytes,
            scanned_bytes=report.scanned_bytes,
            records_checked=report.records,
            pre_dispatched=pre_dispatched,
            reput_from=reput_from,
            elapsed_s=round(elapsed, 3),
        )
        if report.dropped_bytes:
            log.warning(
                "recovery dropped a torn or unflushed CommitLog tail",
                dropped_bytes=report.dropped_bytes,
                at_offset=process_offset,
                physic_checkpoint_ts=self.checkpoint.physic_msg_timestamp,
            )

    def _recover_topic_queue_table(self) -> None:
        table: dict[tuple[str, int], int] = {}
        min_phy = self.commit_log.get_min_offset()
        for cq in self._all_consume_queues():
            table[(cq.topic, cq.queue_id)] = cq.get_max_offset_in_queue()
            cq.correct_min_offset(min_phy)
        self.commit_log.topic_queue_table = table
        known = set(table)
        if known != self._manifest:
            self._manifest = known
            self._manifest_dirty = True

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
            self.commit_log.mapped_file_queue, self.checkpoint, self._run_blocking, self.fault, self._page_releaser()
        )
        if cfg.flush_disk_type == FlushDiskType.SYNC_FLUSH:
            self._flush_service = GroupCommitService(self._flusher)
        else:
            self._flush_service = FlushRealTimeService(cfg, self._flusher, self.now_ms)
        if self.pool is not None:
            self._commit_service = CommitRealTimeService(
                cfg, self.commit_log.mapped_file_queue, self._run_blocking, self.now_ms, self._on_committed
            )
        self._flush_cq_service = FlushConsumeQueueService(
            cfg,
            self._consume_queue_files,
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
        if self._manifest_dirty:
            await self._save_manifest()
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
        svc = PrefaultService(self.commit_log.mapped_file_queue, cfg.prefault_ahead_bytes, populator=populator)
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
        self._cancel_index_build()
        pending = self._end_dispatch_round()  # the keys of the last inline appends (a new file if full)
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
        self._manifest_dirty = True
        await self._save_manifest()
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

    async def _save_manifest(self) -> None:
        """Write the queue manifest; concurrent calls coalesce (one writer, always the latest set)."""
        async with self._manifest_lock:
            if not self._manifest_dirty:
                return
            self._manifest_dirty = False
            try:
                await self._run_blocking(self._write_manifest_blocking, set(self._manifest))
            except OSError as exc:
                self._manifest_dirty = True
                log.warning("cannot write the consume queue manifest", error=str(exc))

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

    # -------------------------------------------------------------------------------------------- put
    def _check_store_status(self) -> tuple[PutMessageStatus, str | None]:
        if self._shutdown:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "message store has shutdown"
        if self.config.broker_role == BrokerRole.SLAVE:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "broker role is slave, so putMessage is forbidden"
        if self._disk_full:
            return PutMessageStatus.SERVICE_NOT_AVAILABLE, "the message store is not writable: the disk is full"
        if self.is_os_page_cache_busy():
            return PutMessageStatus.OS_PAGECACHE_BUSY, "os page cache busy"
        return PutMessageStatus.PUT_OK, None

    def _rewrite_delay(self, msg: MessageExtBrokerInner) -> None:
        """Upstream CommitLog.asyncPutMessage: a DELAY level on a non-transactional message stores it in
        SCHEDULE_TOPIC_XXXX queue level-1 with REAL_TOPIC/REAL_QID (clamped to the max level)."""
        tran = transaction_value(msg.sys_flag)
        if tran not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE) or msg.topic == RMQ_SYS_SCHEDULE_TOPIC:
            return
        level = msg.delay_time_level
        if level <= 0:
            return
        level = min(level, self.commit_log.max_delay_level)
        props = dict(msg.properties)
        props[MessageConst.DELAY] = str(level)
        props[MessageConst.REAL_TOPIC] = msg.topic
        props[MessageConst.REAL_QID] = str(msg.queue_id)
        msg.properties = props
        msg.properties_string = encode_properties(props)
        msg.topic = RMQ_SYS_SCHEDULE_TOPIC
        msg.queue_id = level - 1

    def _plan(self, msg: MessageExtBrokerInner) -> tuple[bytes, int, int] | PutMessageResult:
        """(tail, crc, size) of the record for `msg` (RecordEncoder.plan), or the rejection."""
        if len(msg.topic) > MAX_TOPIC_LENGTH:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, f"topic length {len(msg.topic)} > 127")
        if (unsafe := unsafe_dir_name_reason(msg.topic)) is not None:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, f"the topic cannot be a folder: {unsafe}")
        if msg.body is not None and len(msg.body) > self.config.max_message_size:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                None,
                f"message body size {len(msg.body)} exceeds maxMessageSize {self.config.max_message_size}",
            )
        try:
            return self._encoder.plan(msg)
        except RecordError as exc:
            return self._rejection(exc)

    def _plan_batch(self, msgs: list[MessageExtBrokerInner]) -> tuple[list[bytes], list[int], list[int], int] | PutMessageResult:
        """(tails, crcs, sizes, total) of a batch of one topic (RecordEncoder.plan_many), or the rejection."""
        if len(msgs[0].topic) > MAX_TOPIC_LENGTH:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, f"topic length {len(msgs[0].topic)} > 127")
        if (unsafe := unsafe_dir_name_reason(msgs[0].topic)) is not None:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, f"the topic cannot be a folder: {unsafe}")
        try:
            return self._encoder.plan_many(msgs, self.config.max_message_size)
        except RecordError as exc:
            return self._rejection(exc)

    @staticmethod
    def _rejection(exc: RecordError) -> PutMessageResult:
        text = str(exc)
        status = (
            PutMessageStatus.PROPERTIES_SIZE_EXCEEDED
            if text.startswith("PROPERTIES_SIZE_EXCEEDED")
            else PutMessageStatus.MESSAGE_ILLEGAL
        )
        return PutMessageResult(status, None, text)

    async def put_message(self, msg: MessageExtBrokerInner, *, stall_append_ms: int = 0) -> PutMessageResult:
        """Append one message; with SYNC_FLUSH wait until an fsync covers it."""
        status, remark = self._check_store_status()
        if status != PutMessageStatus.PUT_OK:
            return PutMessageResult(status, None, remark)
        begin = self.now_ms()
        if MessageConst.DELAY in msg.properties:
            self._rewrite_delay(msg)
        plan = self._plan(msg)
        if isinstance(plan, PutMessageResult):
            self.stats.put_failed += 1
            return plan
        tail, crc, size = plan
        return await self._submit(
            [msg], [tail], [crc], [size], size, msg.topic, msg.queue_id, msg.sys_flag,
            msg.prepared_transaction_offset, msg.store_host, stall_append_ms, False, msg, begin,
        )

    async def put_messages(
        self, msgs: list[MessageExtBrokerInner], *, stall_append_ms: int = 0
    ) -> PutMessageResult:
        """Append a batch of messages of one topic and queue: one contiguous write, consecutive queue
        offsets, one file (upstream asyncPutMessages)."""
        status, remark = self._check_store_status()
        if status != PutMessageStatus.PUT_OK:
            return PutMessageResult(status, None, remark)
        if not msgs:
            return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, "empty batch")
        first = msgs[0]
        topic = first.topic
        queue_id = first.queue_id
        for m in msgs:
            if m.topic != topic or m.queue_id != queue_id:
                return PutMessageResult(
                    PutMessageStatus.MESSAGE_ILLEGAL, None, "a batch must target one topic and one queue"
                )
            if m.sys_flag & TRANSACTION_ROLLBACK_TYPE:  # transaction_value(m.sys_flag) != TRANSACTION_NOT_TYPE
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, "batch messages cannot be transactional")
            if MessageConst.DELAY in m.properties and m.delay_time_level > 0:
                return PutMessageResult(PutMessageStatus.MESSAGE_ILLEGAL, None, "batch messages cannot be delayed")
        begin = self.now_ms()
        planned = self._plan_batch(msgs)
        if isinstance(planned, PutMessageResult):
            self.stats.put_failed += 1
            return planned
        tails, crcs, sizes, total = planned
        return await self._submit(
            msgs, tails, crcs, sizes, total, first.topic, first.queue_id, first.sys_flag, 0, first.store_host,
            stall_append_ms, True, None, begin,
        )

    async def _submit(
        self,
        msgs: list[MessageExtBrokerInner],
        tails: list[bytes],
        crcs: list[int],
        sizes: list[int],
        total: int,
        topic: str,
        queue_id: int,
        sys_flag: int,
        prepared_offset: int,
        store_host: tuple[str, int],
        stall_ms: int,
        batch: bool,
        msg: MessageExtBrokerInner | None,
        begin: int,
    ) -> PutMessageResult:
        if total + 8 > self.config.mapped_file_size_commit_log:
            return PutMessageResult(
                PutMessageStatus.MESSAGE_ILLEGAL,
                None,
                f"{total} bytes do not fit in a CommitLog file of {self.config.mapped_file_size_commit_log}",
            )
        req = AppendRequest(
            msgs, tails, crcs, sizes, total, topic, queue_id, sys_flag, prepared_offset, store_host, stall_ms, None,
            batch,
        )
        cl = self.commit_log
        result: AppendMessageResult | AppendFailure | None = cl.append_now(req) if stall_ms <= 0 else None
        if result is not None:
            if self.pool is not None and cl.dispatch_queue:
                # records in a pool buffer: readable, so dispatched, once the commit service wrote them
                # (it wakes the reput); a put does not wait for that, as upstream's does not
                pass
            elif cl.dispatch_queue or (self._index_keys and self.index_service.room() < len(self._index_keys)):
                # records the inline dispatch left to the reput, or keys that need the next index
                # file: a round of the reput does both (awaiting the file) before the put returns
                await self.reput.wait_dispatched(result.wrote_offset + result.wrote_bytes)
            elif self._index_keys:
                if len(self._index_keys) >= _INDEX_BUILD_BATCH:
                    self._deferred_index_build()
                elif self._index_build_handle is None:
                    self._index_build_handle = asyncio.get_running_loop().call_later(
                        _INDEX_BUILD_DELAY_S, self._deferred_index_build
                    )
            self._inline_appends += 1
            if self._inline_appends >= _YIELD_EVERY_INLINE:
                # a caller putting in a loop would otherwise never let the event loop run
                self._inline_appends = 0
                await asyncio.sleep(0)
        else:
            req.future = asyncio.get_running_loop().create_future()
            cl.submit(req)
            result = await req.future
        if isinstance(result, AppendFailure):
            self.stats.put_failed += 1
            return PutMessageResult(result.status, None, result.remark)
        if msg is not None:
            msg.store_timestamp = result.store_timestamp
        status = PutMessageStatus.PUT_OK
        cfg = self.config
        if cfg.flush_disk_type == FlushDiskType.SYNC_FLUSH:
            wait = msg is None or msg.properties.get(MessageConst.WAIT, "true").lower() != "false"
            service = self._flush_service
            if wait and isinstance(service, GroupCommitService):
                fut_flush = service.put_request(result.wrote_offset + result.wrote_bytes)
                try:
                    ok = await asyncio.wait_for(asyncio.shield(fut_flush), cfg.sync_flush_timeout / 1000)
                except TimeoutError:
                    ok = False
                if not ok:
                    log.error(
                        "do groupcommit, wait for flush failed",
                        topic=topic,
                        offset=result.wrote_offset,
                        timeout_ms=cfg.sync_flush_timeout,
                    )
                    status = PutMessageStatus.FLUSH_DISK_TIMEOUT
            elif service is not None:
                service.wakeup()
        elif self._commit_service is not None:
            self._commit_service.wakeup()
        elif self._flush_service is not None and not cfg.flush_commit_log_timed:
            self._flush_service.wakeup()
        self.stats.put_done(self.now_ms() - begin)
        return PutMessageResult(status, result)

    async def _after_append(self) -> None:
        """After each writer section: dispatch what became readable, so that (without a transient pool,
        where bytes become readable only once committed) a put returns after its consume queue entry
        exists and its arrival was announced."""
        await self.reput.wait_dispatched(self.commit_log.get_max_offset())

    def _on_committed(self) -> None:
        self.reput.wakeup()
        if self._flush_service is not None:
            self._flush_service.wakeup()

    # --------------------------------------------------------------------------------------- dispatch
    def find_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """The queue, created on first use; UnsafeStorePath (nothing created) for a topic that cannot be a
        folder inside the store."""
        queues = self.consume_queue_table.get(topic)
        cq = None if queues is None else queues.get(queue_id)
        if cq is None:
            cq = self._new_consume_queue(topic, queue_id)
            if queues is None:
                queues = self.consume_queue_table[topic] = {}
            queues[queue_id] = cq
            if (topic, queue_id) not in self._manifest:
                self._manifest.add((topic, queue_id))
                self._manifest_dirty = True
                if self._running:
                    asyncio.get_running_loop().create_task(self._save_manifest())
        return cq

    def _dispatch_failed(self, what: str, topic: str, queue_id: int, exc: BaseException) -> None:
        """One record (or queue) that cannot be dispatched costs its consume queue entry, never the writer
        or the reput: one error line per queue (a bad queue could otherwise log once per record)."""
        key = (topic, queue_id)
        if key in self._dispatch_failures:
            return
        if len(self._dispatch_failures) < 1024:
            self._dispatch_failures.add(key)
        log.error("dispatch failed, the record stays in the CommitLog without a consume queue entry", step=what,
                  topic=topic[:200], queue_id=queue_id, error=f"{type(exc).__name__}: {exc}",
                  exc_info=not isinstance(exc, UnsafeStorePath))

    def _queue_for_dispatch(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        try:
            return self.find_consume_queue(topic, queue_id)
        except UnsafeStorePath as exc:
            self._dispatch_failed("queue", topic, queue_id, exc)
            return None

    def _get_consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        queues = self.consume_queue_table.get(topic)
        return None if queues is None else queues.get(queue_id)

    def _prepare_dispatch(self, req: DispatchRequest) -> Any:
        tran = transaction_value(req.sys_flag)
        if tran == TRANSACTION_NOT_TYPE or tran == TRANSACTION_COMMIT_TYPE:
            cq = self._queue_for_dispatch(req.topic, req.queue_id)
            if (cq is not None and cq.needs_file_for(req.consume_queue_offset)
                    and req.commit_log_offset + req.msg_size > cq.max_physic_offset
                    and (req.topic, req.queue_id) not in self._unwritable_queues):
                return self._guarded(cq.ensure_file_for(req.consume_queue_offset), req.topic, req.queue_id)
        if self._index_enabled and self.index_service.needs_file():
            return self.index_service.ensure_file()
        return None

    async def _guarded(self, pending: Awaitable[Any], topic: str, queue_id: int) -> None:
        """A consume queue file that cannot be created: logged, and the dispatch of the record fails alone."""
        try:
            await pending
        except Exception as exc:  # noqa: BLE001 - e.g. EACCES, ENAMETOOLONG: one queue, not the reput
            # from now on its records go straight to _dispatch (which tries, fails alone): no retry loop here
            self._unwritable_queues.add((topic, queue_id))
            self._dispatch_failed("create file", topic, queue_id, exc)

    def _dispatch(self, req: DispatchRequest) -> None:
        try:
            self._dispatch_one(req)
        except Exception as exc:  # noqa: BLE001 - never stop the reput for the records after this one
            self._dispatch_failed("record", req.topic, req.queue_id, exc)

    def _dispatch_one(self, req: DispatchRequest) -> None:
        tran = transaction_value(req.sys_flag)
        if tran == TRANSACTION_NOT_TYPE or tran == TRANSACTION_COMMIT_TYPE:
            cq = self._queue_for_dispatch(req.topic, req.queue_id)
            if cq is None:
                pass
            elif cq.put_message_position_info(req.commit_log_offset, req.msg_size, req.tags_code,
                                              req.consume_queue_offset):
                if self.checkpoint is not None:
                    self.checkpoint.logics_msg_timestamp = req.store_timestamp
            else:
                log.error("[BUG] put commit log position info failed", topic=req.topic, queue_id=req.queue_id)
        if self._index_enabled and tran != TRANSACTION_ROLLBACK_TYPE:
            self._queue_index_keys(req.topic, req.uniq_key, req.keys, req.commit_log_offset, req.store_timestamp)
        listener = self.message_arriving_listener
        if listener is not None and self.config.broker_role != BrokerRole.SLAVE:
            try:
                listener(
                    req.topic,
                    req.queue_id,
                    req.consume_queue_offset + 1,
                    req.tags_code,
                    req.store_timestamp,
                    req.properties,
                )
            except Exception:
                log.exception("message arriving listener failed", topic=req.topic)

    def _dispatch_appended(self, req: AppendRequest, phy: int, queue_offset: int, store_ts: int) -> int:
        """`_dispatch_appended_inline`, and 0 (the reput dispatches these records, replaying what was done)
        if it failed: the writer must go on whatever one record does."""
        try:
            return self._dispatch_appended_inline(req, phy, queue_offset, store_ts)
        except Exception as exc:  # noqa: BLE001
            self._dispatch_failed("inline", req.topic, req.queue_id, exc)
            return 0

    def _dispatch_appended_inline(self, req: AppendRequest, phy: int, queue_offset: int, store_ts: int) -> int:
        """The writer's inline dispatch (same effects as `_dispatch` per record, without building
        DispatchRequests): only while the reput is caught up to this request and every file the records
        need exists. Returns how many records were dispatched; the reput takes the rest."""
        reput = self.reput
        if reput.reput_from_offset != phy or reput.running or self.commit_log.dispatch_queue:
            return 0
        index = self._index_enabled
        if index and self.index_service.needs_file():
            return 0
        if req.phys is not None and self._dispatch_batch(req, queue_offset, store_ts):
            return len(req.msgs)
        topic = req.topic
        queue_id = req.queue_id
        tran = transaction_value(req.sys_flag)
        counts = tran == TRANSACTION_NOT_TYPE or tran == TRANSACTION_COMMIT_TYPE
        cq = self._queue_for_dispatch(topic, queue_id) if counts else None
        index = index and tran != TRANSACTION_ROLLBACK_TYPE
        listener = self.message_arriving_listener
        if self.config.broker_role == BrokerRole.SLAVE:
            listener = None
        cl = self.commit_log
        scheduled = topic == RMQ_SYS_SCHEDULE_TOPIC
        tags_codes = cl.tags_cache  # TAGS → hash (the common case, inlined)
        index_keys_, index_phys, index_times = self._index_keys, self._index_phys, self._index_times
        checkpoint = self.checkpoint
        sizes = req.sizes
        qo = queue_offset
        done = 0
        sep = MessageConst.KEY_SEPARATOR
        for m in req.msgs:
            size = sizes[done]
            props = m.properties
            tags = props.get(MessageConst.TAGS)
            if scheduled or (tags_code := tags_codes.get(tags)) is None:
                tags_code = cl.dispatch_tags_code(topic, props, store_ts)
            if cq is not None:
                if not cq.try_append(phy, size, tags_code, qo):
                    if cq.needs_file_for(qo) and phy + size > cq.max_physic_offset:
                        break  # the file is created in a worker thread: the reput continues from here
                    if not cq.put_message_position_info(phy, size, tags_code, qo):
                        log.error("[BUG] put commit log position info failed", topic=topic, queue_id=queue_id)
                if checkpoint is not None:
                    checkpoint.logics_msg_timestamp = store_ts
            if index:
                uniq = props.get(MessageConst.UNIQ_KEY)
                keys = props.get(MessageConst.KEYS)
                if keys and sep in keys:
                    self._queue_index_keys(topic, uniq, keys, phy, store_ts)
                else:  # (index_keys inlined for at most one key each)
                    if uniq:
                        index_keys_.append(f"{topic}#{uniq}")
                        index_phys.append(phy)
                        index_times.append(store_ts)
                    if keys:
                        index_keys_.append(f"{topic}#{keys}")
                        index_phys.append(phy)
                        index_times.append(store_ts)
            if listener is not None:
                try:
                    listener(topic, queue_id, qo + 1, tags_code, store_ts, props)
                except Exception:
                    log.exception("message arriving listener failed", topic=topic)
            phy += size
            if counts:
                qo += 1
            done += 1
        reput.reput_from_offset = phy
        reput.dispatched_total += done
        return done

    def _dispatch_described_batch(self, batch: DispatchBatch) -> bool:
        """The reput's path for a batch descriptor (a batch in a pool buffer, now committed)."""
        if self._index_enabled and self.index_service.needs_file():
            return False
        return self._dispatch_batch(batch.request, batch.consume_queue_offset, batch.store_timestamp)

    def _dispatch_batch(self, req: AppendRequest, queue_offset: int, store_ts: int) -> bool:
        """`_dispatch_appended` for a batch the writer just appended (one topic and queue, no
        transaction, no delay) in list passes instead of a loop over records: every consume queue entry
        in one `try_append_many`, the index keys extended at once. False (nothing done) when that does
        not apply: the record-by-record loop then handles it."""
        topic = req.topic
        phys = req.phys
        if topic == RMQ_SYS_SCHEDULE_TOPIC or req.sys_flag & TRANSACTION_ROLLBACK_TYPE or phys is None:
            return False
        cl = self.commit_log
        props = [m.properties for m in req.msgs]
        tags = MessageConst.TAGS
        codes = [cl.tags_cache.get(p.get(tags)) for p in props]
        if None in codes:
            codes = [cl.tags_code_of(p.get(tags)) for p in props]
        cq = self._queue_for_dispatch(topic, req.queue_id)
        if cq is None or not cq.try_append_many(phys, req.sizes, codes, queue_offset):
            return False
        if self.checkpoint is not None:
            self.checkpoint.logics_msg_timestamp = store_ts
        n = len(phys)
        if self._index_enabled:
            uniq = MessageConst.UNIQ_KEY
            uniqs = [p.get(uniq) for p in props]
            if all(uniqs) and not any(MessageConst.KEYS in p for p in props):
                prefix = topic + "#"
                self._index_keys.extend([prefix + u for u in uniqs])
                self._index_phys.extend(phys)
                self._index_times.extend([store_ts] * n)
            else:
                for p, phy in zip(props, phys):
                    self._queue_index_keys(topic, p.get(uniq), p.get(MessageConst.KEYS), phy, store_ts)
        listener = self.message_arriving_listener
        if listener is not None and self.config.broker_role != BrokerRole.SLAVE:
            queue_id = req.queue_id
            for i in range(n):
                try:
                    listener(topic, queue_id, queue_offset + i + 1, codes[i], store_ts, props[i])
                except Exception:
                    log.exception("message arriving listener failed", topic=topic)
        self.reput.reput_from_offset = phys[-1] + req.sizes[-1]
        self.reput.dispatched_total += n
        return True

    async def _dispatch_many(self, recs: ParsedRecords) -> None:
        """`_dispatch` for records parsed in bulk (recovery, rebuilds): the entries of each queue in one
        vectorised write, the index keys into the round's batch, arrival notices only once the store
        runs (before that nobody can be waiting)."""
        tran = recs.sys_flag & TRANSACTION_ROLLBACK_TYPE
        to_cq = (tran == TRANSACTION_NOT_TYPE) | (tran == TRANSACTION_COMMIT_TYPE)
        if to_cq.any():
            qkey = (recs.topic_id << 32) | (recs.queue_id & 0xFFFFFFFF)
            qkey = np.where(to_cq, qkey, -1)
            _, first = np.unique(qkey, return_index=True)
            for k in qkey[np.sort(first)].tolist():
                if k < 0:
                    continue
                idx = np.flatnonzero(qkey == k)
                topic = recs.topics[k >> 32]
                queue_id = int(recs.queue_id[idx[0]])
                try:
                    cq = self.find_consume_queue(topic, queue_id)
                    failed = await cq.put_entries(
                        recs.phy[idx], recs.size[idx], recs.tags_code[idx], recs.queue_offset[idx]
                    )
                except Exception as exc:  # noqa: BLE001 - this queue's entries only
                    self._dispatch_failed("bulk", topic, queue_id, exc)
                    continue
                if failed:
                    log.error("[BUG] put commit log position info failed", topic=topic, queue_id=queue_id, entries=failed)
            if self.checkpoint is not None:
                self.checkpoint.logics_msg_timestamp = int(recs.store_ts[np.flatnonzero(to_cq)[-1]])
        if self._index_enabled and len(recs.key_record):
            self._build_index_keys()  # the round's earlier keys go first (CommitLog order)
            if self.index_service.needs_file():
                await self.index_service.ensure_file()
            keep = (tran != TRANSACTION_ROLLBACK_TYPE)[recs.key_record]  # no keys of rolled-back messages
            rec = recs.key_record[keep]
            self.index_service.build_hashed(recs.key_hash[keep], recs.phy[rec], recs.store_ts[rec])
        listener = self.message_arriving_listener
        if listener is not None and self._running and self.config.broker_role != BrokerRole.SLAVE:
            props = recs.props or [b""] * len(recs)
            for i in range(len(recs)):
                topic = recs.topics[int(recs.topic_id[i])]
                try:
                    listener(
                        topic,
                        int(recs.queue_id[i]),
                        int(recs.queue_offset[i]) + 1,
                        int(recs.tags_code[i]),
                        int(recs.store_ts[i]),
                        decode_properties(props[i].decode("utf-8", errors="replace")),
                    )
                except Exception:
                    log.exception("message arriving listener failed", topic=topic)

    def _deferred_index_build(self) -> None:
        """Index the keys of the puts appended inline since the last build, in one pass (at most
        _INDEX_BUILD_DELAY_S after the first of them, or at once once _INDEX_BUILD_BATCH wait)."""
        self._cancel_index_build()
        self._build_index_keys()
        if self._index_enabled and self.index_service.has_pending():
            self.reput.wakeup()  # its round ends with creating the next index file

    def _cancel_index_build(self) -> None:
        handle, self._index_build_handle = self._index_build_handle, None
        if handle is not None:
            handle.cancel()

    def _queue_index_keys(self, topic: str, uniq: str | None, keys: str | None, phy: int, store_ts: int) -> None:
        """Queue a record's index keys (UNIQ_KEY, each of KEYS) for the next bulk build."""
        for key in index_keys(topic, uniq, keys):
            self._index_keys.append(key)
            self._index_phys.append(phy)
            self._index_times.append(store_ts)

    def _build_index_keys(self) -> None:
        if self._index_keys:
            keys, phys, times = self._index_keys, self._index_phys, self._index_times
            self._index_keys, self._index_phys, self._index_times = [], [], []
            self.index_service.build_keys(keys, phys, times)

    def _end_dispatch_round(self) -> Any:
        """Index what the round dispatched (one vectorised pass); an awaitable if an index file is needed."""
        self._build_index_keys()
        if self._index_enabled and self.index_service.has_pending():
            return self.index_service.ensure_file()
        return None

    def _all_consume_queues(self) -> Iterable[ConsumeQueue]:
        for queues in list(self.consume_queue_table.values()):
            yield from list(queues.values())

    def _consume_queue_files(self):
        for cq in self._all_consume_queues():
            yield cq.mapped_file_queue

    async def _flush_index(self) -> None:
        self._build_index_keys()
        await self.index_service.flush(self.checkpoint)

    # -------------------------------------------------------------------------------------------- get
    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None = None,
    ) -> GetMessageResult:
        """Up to `max_msg_nums` raw records from `offset` (upstream DefaultMessageStore.getMessage).

        Raises StoreNotReadableError once the store is shut down (upstream returns null there; the
        broker answers SYSTEM_ERROR either way)."""
        self._ensure_readable("getMessage")
        begin = self.now_ms()
        status = GetMessageStatus.NO_MESSAGE_IN_QUEUE
        next_begin = offset
        min_offset = max_offset = 0
        result = GetMessageResult(status, offset, 0, 0)
        cq = self._get_consume_queue(topic, queue_id)
        if cq is None:
            status = GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
            next_begin = self._next_offset_correction(offset, 0)
        else:
            min_offset = cq.get_min_offset_in_queue()
            max_offset = cq.get_max_offset_in_queue()
            if max_offset == 0:
                status = GetMessageStatus.NO_MESSAGE_IN_QUEUE
                next_begin = self._next_offset_correction(offset, 0)
            elif offset < min_offset:
                status = GetMessageStatus.OFFSET_TOO_SMALL
                next_begin = self._next_offset_correction(offset, min_offset)
            elif offset == max_offset:
                status = GetMessageStatus.OFFSET_OVERFLOW_ONE
                next_begin = self._next_offset_correction(offset, offset)
            elif offset > max_offset:
                status = GetMessageStatus.OFFSET_OVERFLOW_BADLY
                next_begin = self._next_offset_correction(offset, max_offset)
            else:
                status, next_begin = self._read_queue(cq, offset, max_msg_nums, message_filter, result)
        if status == GetMessageStatus.FOUND:
            self.stats.get_found += 1
        else:
            self.stats.get_miss += 1
        self.stats.get_time(self.now_ms() - begin)
        result.status = status
        result.next_begin_offset = next_begin
        result.min_offset = min_offset
        result.max_offset = max_offset
        return result

    def _read_queue(
        self,
        cq: ConsumeQueue,
        offset: int,
        max_msg_nums: int,
        message_filter: MessageFilter | None,
        result: GetMessageResult,
    ) -> tuple[GetMessageStatus, int]:
        cfg = self.config
        max_entries = max(16000, max_msg_nums * CQ_STORE_UNIT_SIZE) // CQ_STORE_UNIT_SIZE
        code_set: Any = None
        vector = False
        if message_filter is not None:
            get_codes = getattr(message_filter, "tags_code_set", None)
            if get_codes is not None:
                vector = True
                code_set = get_codes()
        entries = cq.get_entries(offset, max_entries)
        if entries is None:
            return GetMessageStatus.OFFSET_FOUND_NULL, self._next_offset_correction(offset, cq.roll_next_file(offset))
        status = GetMessageStatus.NO_MATCHED_MESSAGE
        n = len(entries)
        phy = entries["offset"].tolist()
        sizes = entries["size"].tolist()
        if message_filter is None or (vector and code_set is None):
            matched: list[bool] | None = None
        elif vector:
            codes = np.fromiter(code_set, dtype=np.int32, count=len(code_set))
            matched = np.isin(tags_to_int32(entries["tags"]), codes).tolist()
        else:
            tags = entries["tags"].tolist()
            matched = [message_filter.is_matched_by_consume_queue(t) for t in tags]
        max_phy = self.commit_log.get_max_offset()
        memory = self._total_memory * cfg.access_message_in_memory_max_ratio // 100
        next_phy_file_start = -1
        total_size = 0
        count = 0
        buffers = result.buffers
        queue_offsets = result.msg_queue_offsets
        max_phy_pulling = 0
        i = 0
        get_message = self.commit_log.get_message
        while i < n:
            offset_py = phy[i]
            size_py = sizes[i]
            max_phy_pulling = offset_py
            if next_phy_file_start != -1 and offset_py < next_phy_file_start:
                i += 1
                continue
            if count:
                # isTheBatchFull (the first message is always taken)
                if max_msg_nums <= count:
                    break
                if max_phy - offset_py > memory:
                    if total_size + size_py > cfg.max_transfer_bytes_on_message_in_disk:
                        break
                    if count > cfg.max_transfer_count_on_message_in_disk - 1:
                        break
                else:
                    if total_size + size_py > cfg.max_transfer_bytes_on_message_in_memory:
                        break
                    if count > cfg.max_transfer_count_on_message_in_memory - 1:
                        break
            if matched is not None and not matched[i]:
                if not total_size:
                    status = GetMessageStatus.NO_MATCHED_MESSAGE
                i += 1
                continue
            view = get_message(offset_py, size_py)
            if view is None:
                if not total_size:
                    status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_phy_file_start = self.commit_log.roll_next_file(offset_py)
                i += 1
                continue
            if message_filter is not None and not message_filter.is_matched_by_commit_log(view, None):
                if not total_size:
                    status = GetMessageStatus.NO_MATCHED_MESSAGE
                i += 1
                continue
            buffers.append(view)
            queue_offsets.append(offset + i)
            total_size += size_py
            count += 1
            status = GetMessageStatus.FOUND
            next_phy_file_start = -1
            i += 1
        result.message_count = count
        result.buffer_total_size = total_size
        self.stats.get_transferred += count
        result.suggest_pulling_from_slave = max_phy - max_phy_pulling > memory
        return status, offset + i

    def _ensure_readable(self, what: str) -> None:
        if not self._loaded:
            raise StoreNotReadableError(f"message store is not loaded or has shut down, so {what} is forbidden")

    def _next_offset_correction(self, old: int, new: int) -> int:
        if self.config.broker_role != BrokerRole.SLAVE or self.config.offset_check_in_slave:
            return new
        return old

    # ------------------------------------------------------------------------------------ offsets API
    def get_max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._get_consume_queue(topic, queue_id)
        return cq.get_max_offset_in_queue() if cq is not None else 0

    def get_min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._get_consume_queue(topic, queue_id)
        return cq.get_min_offset_in_queue() if cq is not None else -1

    def get_commit_log_offset_in_queue(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self._get_consume_queue(topic, queue_id)
        if cq is not None:
            entry = cq.get_entry(cq_offset)
            if entry is not None:
                return entry[0]
        return 0

    def get_offset_in_queue_by_time(self, topic: str, queue_id: int, ts_ms: int) -> int:
        cq = self._get_consume_queue(topic, queue_id)
        if cq is None:
            return 0
        return cq.get_offset_in_queue_by_time(
            ts_ms, self.commit_log.pickup_store_timestamp, self.commit_log.get_min_offset()
        )

    def get_earliest_message_time(self, topic: str, queue_id: int) -> int:
        cq = self._get_consume_queue(topic, queue_id)
        if cq is None:
            return -1
        entry = cq.get_entry(cq.get_min_offset_in_queue())
        if entry is None:
            return -1
        return self.commit_log.pickup_store_timestamp(entry[0], entry[1])

    def get_message_store_timestamp(self, topic: str, queue_id: int, cq_offset: int) -> int:
        cq = self._get_consume_queue(topic, queue_id)
        entry = cq.get_entry(cq_offset) if cq is not None else None
        if entry is None:
            return -1
        return self.commit_log.pickup_store_timestamp(entry[0], entry[1])

    def get_message_total_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._get_consume_queue(topic, queue_id)
        return cq.get_message_total_in_queue() if cq is not None else -1

    def get_max_phy_offset(self) -> int:
        return self.commit_log.get_max_offset()

    def get_min_phy_offset(self) -> int:
        return self.commit_log.get_min_offset()

    def dispatch_behind_bytes(self) -> int:
        return self.reput.behind()

    def look_message_by_offset(self, phy_offset: int) -> MessageExt | None:
        record = self.select_one_message_by_offset(phy_offset)
        if record is None:
            return None
        try:
            return decode_record(record)
        except RecordError:
            return None

    def select_one_message_by_offset(self, phy_offset: int) -> memoryview | None:
        """The raw record at `phy_offset` (a view into the mapping) or None."""
        self._ensure_readable("selectOneMessageByOffset")
        head = self.commit_log.get_message(phy_offset, 8)
        if head is None:
            return None
        size = int.from_bytes(head[:4], "big", signed=True)
        if size < 91 or int.from_bytes(head[4:8], "big", signed=True) != MESSAGE_MAGIC_CODE:
            return None
        return self.commit_log.get_message(phy_offset, size)

    # -------------------------------------------------------------------------------------- querying
    def query_message(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> QueryMessageResult:
        """Messages of `topic` whose KEYS or UNIQ_KEY contain `key`, stored within [begin, end]
        (upstream queryMessage: up to three rounds over the index, newest first)."""
        self._ensure_readable("queryMessage")
        out = QueryMessageResult()
        if not self.config.message_index_enable:
            return out
        self._build_index_keys()  # keys of puts that already returned
        last_query_time = end_ms
        seen: set[int] = set()
        for _ in range(3):
            offsets, last_ts, last_phy = self.index_service.query_offset(topic, key, max_num, begin_ms, last_query_time)
            if not offsets:
                break
            offsets.sort()
            out.index_last_update_timestamp = last_ts
            out.index_last_update_phyoffset = last_phy
            for m, phy in enumerate(offsets):
                if phy in seen:
                    continue
                record = self.select_one_message_by_offset(phy)
                if record is None:
                    continue
                try:
                    msg = decode_record(record, read_body=False)
                except RecordError:
                    continue
                if m == 0:
                    last_query_time = msg.store_timestamp
                # the index is a hash: make sure this record really carries the key (and the topic)
                if msg.topic != topic or not _has_key(msg, key):
                    continue
                seen.add(phy)
                out.buffers.append(record)
                out.buffer_total_size += len(record)
            if out.buffer_total_size > 0 or last_query_time < begin_ms:
                break
        return out

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
                self._manifest.discard((topic, qid))
                deleted += 1
            log.info("delete topic consume queues", topic=topic, queues=len(queues))
        if deleted:
            self._manifest_dirty = True
            if self._running:
                asyncio.get_running_loop().create_task(self._save_manifest())
        return deleted

    def clean_unused_topics(self, keep: set[str]) -> int:
        return self.delete_topics([t for t in list(self.consume_queue_table) if t not in keep])

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


def _has_key(msg: MessageExt, key: str) -> bool:
    if msg.properties.get(MessageConst.UNIQ_KEY) == key:
        return True
    keys = msg.properties.get(MessageConst.KEYS)
    return bool(keys) and key in keys.split(MessageConst.KEY_SEPARATOR)


__all__ = ["MessageStore", "StoreConfigError", "StoreNotReadableError"]
