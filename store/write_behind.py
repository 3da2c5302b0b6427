"""WriteBehind: start the disk writes of appended CommitLog bytes as they are appended, not at the flush.

Without it, nothing writes the CommitLog's dirty pages to disk but the flush: the kernel's own flusher
starts only past `dirty_background_ratio` (gigabytes on a broker host), and an ASYNC_FLUSH flush covers
everything appended since the last one (up to a whole file, with a flush every 500 ms or once the previous
one ended). The disk then idles while the pages pile up and each flush waits for all of them at once: with
4 KiB batches the last flush of `bench.store_append` took 16-35 % of the run, and the store reached half of
the raw write bandwidth of the same disk (whose reference writes and syncs every 50 ms).

This service, on a thread of its own, is kicked every `step` bytes appended (by the pre-fault service,
which the writer already wakes at that pace, store.prefault): it drops the appended pages from the mapping
(MADV_DONTNEED, as the flush does before its sync: write-back of a page still mapped writable
write-protects it with a TLB flush to every core) and starts their write-back with
`sync_file_range(SYNC_FILE_RANGE_WRITE)`, which queues the I/O and returns. Durability is unchanged: the
flush still syncs its range (store.range_sync) and only then moves the flushed position; it now finds most
pages written or in flight. The calls go through ctypes and release the GIL. A consumer reading the newest records
through the mapping faults their pages back in read-only (the kernel maps 16 cached pages per such fault), as
it did after each flush before.

A kernel that refuses sync_file_range (ENOSYS, EINVAL on some file systems) gets one log line and the
service turns itself off for the life of the store.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import mmap
import threading

import structlog

from store.config import OS_PAGE_SIZE
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue
from store.prefault import Madvise, PrefaultUnsupported

log = structlog.get_logger(__name__)

SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h: start write-back of the range's dirty pages, do not wait for it
MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", 4)


class WriteBehind:
    """Starts write-back of what the CommitLog writer appended (see the module docstring)."""

    def __init__(self, mfq: MappedFileQueue, release: Madvise | None) -> None:
        libc = ctypes.CDLL(None, use_errno=True)  # dlopen(NULL), as store.prefault
        self._sync_file_range = libc.sync_file_range
        self._sync_file_range.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
        self._sync_file_range.restype = ctypes.c_int
        self.mfq = mfq
        self._release = release
        self.enabled = True
        self.started_bytes = 0  # what was handed to write-back (tests, bench)
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()
        self._stopped = False
        self._armed = False  # start() arms it: the first kick after that starts the thread

    def start(self) -> None:
        """Arm the service; its thread starts at the first kick (an idle broker keeps no thread for it)."""
        self._stopped = False
        self._armed = True

    def kick(self) -> None:
        """Called from any thread once more bytes were appended."""
        if self._thread is None:
            with self._starting:
                if self._thread is None and self._armed and self.enabled and not self._stopped:
                    self._thread = threading.Thread(target=self._run, name="commitlog-write-behind", daemon=True)
                    self._thread.start()
        self._wake.set()

    async def stop(self) -> None:
        with self._starting:
            self._stopped = True
            self._armed = False
            thread, self._thread = self._thread, None
        self._wake.set()
        if thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 30)

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait()
            self._wake.clear()
            if self._stopped:
                return
            try:
                self.write_behind()
            except OSError as exc:
                self.enabled = False
                log.warning("CommitLog write-behind disabled", error=str(exc))
                return
            except Exception:
                log.exception("CommitLog write-behind failed; trying again at the next kick")

    def write_behind(self) -> None:
        """Start write-back of every whole page appended since the last call, in the files not flushed yet.
        Blocking: runs on the service's thread (tests call it directly)."""
        pending = []
        for mf in reversed(self.mfq.mapped_files):  # (newest first: the flushed files before them are done)
            if mf.flushed_position >= mf.file_size:
                break
            pending.append(mf)
        for mf in reversed(pending):
            if mf.write_buffer is not None:
                continue
            end = mf.wrote_position - mf.wrote_position % OS_PAGE_SIZE
            start = max(mf.write_behind_position, mf.flushed_position - mf.flushed_position % OS_PAGE_SIZE)
            if end <= start or not mf.hold():
                continue
            try:
                self._write_range(mf, start, end)
            finally:
                mf.release()

    def _write_range(self, mf: MappedFile, start: int, end: int) -> None:
        if self._release is not None and mf.released_position < end:
            try:
                reached = self._release.apply(mf, mf.released_position, end, self._is_stopped)
            except PrefaultUnsupported:
                self._release = None
            else:
                mf.released_position = max(mf.released_position, reached)
        if self._sync_file_range(mf.fd, start, end - start, SYNC_FILE_RANGE_WRITE) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"sync_file_range failed: {errno.errorcode.get(err, err)}")
        mf.write_behind_position = end
        self.started_bytes += end - start

    def _is_stopped(self) -> bool:
        return self._stopped


def write_behind(mfq: MappedFileQueue) -> WriteBehind | None:
    """The CommitLog's WriteBehind, or None where ctypes cannot reach sync_file_range or madvise."""
    try:
        return WriteBehind(mfq, Madvise(MADV_DONTNEED))
    except (OSError, AttributeError) as exc:
        log.warning("CommitLog write-behind off: no sync_file_range", error=str(exc))
        return None
