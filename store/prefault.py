"""PrefaultService: keep a window of the CommitLog ahead of the write position populated and writable.

With sparse CommitLog files (the default), the first write to each 4 KiB page faults, and that fault
allocates the file block (ext4 page_mkwrite) on the event loop's thread: measured ~12 us per 4 KiB
append against ~0.6 us for a page already mapped writable. This service asks the kernel, from a worker
thread, to populate the pages of `[write position, write position + window)` with
`madvise(MADV_POPULATE_WRITE)` (Linux >= 5.14). On a shared file mapping that only faults the pages in
writable (allocating their blocks); it never changes their contents, so it may run while the writer
copies records into the same pages. Disk use stays proportional to data: at most one window beyond it.

The writer wakes the service when it crosses `wake_offset` (one integer compare per append); the
service, on its own thread, refills the window in 8 MiB madvise steps so that a shutdown does not
wait long. A kernel that refuses (EINVAL on < 5.14, ENOSYS, ...) gets one log line and the service
turns itself off for the life of the store.

A store that has not been written to since it started populates nothing: the service waits for the first
append (its wake-up offset starts at 0) and new files get their first window only after it. An idle broker
then holds no populated window (2 x 32 MiB of dirty page cache mapped by it alone, issue 15); the first
appends after a boot take their own page faults for the few milliseconds the first refill needs.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from store.config import OS_PAGE_SIZE
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue

if TYPE_CHECKING:
    from store.write_behind import WriteBehind

log = structlog.get_logger(__name__)

MADV_POPULATE_WRITE = 23  # linux/mman.h; Python's mmap module does not export it before 3.13
# bytes per madvise call: bounds how long a stop waits for the thread (~4 ms at 2 GB/s). Not less: the
# thread needs the GIL back after each call, and a busy event loop hands it over only every switch
# interval (5 ms), so 1 MiB calls populated at most ~200 MB/s and fell behind a 4 KiB batch writer.
STEP = 8 * 1024 * 1024
NO_WAKE = 1 << 62


class PrefaultUnsupported(OSError):
    """The kernel refused MADV_POPULATE_WRITE; pre-faulting is off for the life of the store."""


class Madvise:
    """Calls madvise(`advice`) on ranges of a mapped file through ctypes: unlike `mmap.madvise`, a
    ctypes call releases the GIL, so advice over several MiB in a worker thread does not stall the
    event loop. The pre-fault service populates with it (MADV_POPULATE_WRITE); the CommitLog flush
    drops written pages from the mapping with it (MADV_DONTNEED, store.flush)."""

    def __init__(self, advice: int = MADV_POPULATE_WRITE) -> None:
        # dlopen(NULL): the interpreter's own symbols, libc's madvise among them. Not ctypes.util.find_library,
        # which runs `ldconfig -p` in a subprocess (~0.1 s of a broker's start, twice; issue 15)
        libc = ctypes.CDLL(None, use_errno=True)
        self._madvise = libc.madvise
        self._madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self._madvise.restype = ctypes.c_int
        self._advice = advice

    @staticmethod
    def base_address(mf: MappedFile) -> int:
        # the c_char exports the mmap's buffer only for this statement; the caller holds the file so
        # the mapping cannot be closed while madvise runs on its address
        anchor = ctypes.c_char.from_buffer(mf.mm)
        try:
            return ctypes.addressof(anchor)
        finally:
            del anchor

    def apply(self, mf: MappedFile, start: int, end: int, stopped: Callable[[], bool]) -> int:
        """Advise [start, end) of `mf` (page aligned, within the file), STEP bytes per call. Blocking:
        run in a worker thread. Returns the end actually reached (less when `stopped()` turned true)."""
        if not mf.hold():
            return start
        try:
            base = self.base_address(mf)
            pos = start
            while pos < end and not stopped():
                n = min(STEP, end - pos)
                if self._madvise(base + pos, n, self._advice) != 0:
                    err = ctypes.get_errno()
                    raise PrefaultUnsupported(err, f"madvise({self._advice}) failed: {errno.errorcode.get(err, err)}")
                pos += n
            return pos
        finally:
            mf.release()


def window_end(mf: MappedFile, ahead: int) -> int:
    """Page-aligned end of the window ahead of `mf`'s write position, never past the file."""
    end = mf.wrote_position + ahead
    end -= end % OS_PAGE_SIZE
    return min(mf.file_size, end)


class PrefaultService:
    """Keeps `ahead` bytes after the CommitLog's write position populated (see the module docstring).

    It runs on a thread of its own rather than through the event loop: a writer that appends inline
    for many puts in a row lets the loop run only now and then, and a refill that waited for the loop
    to schedule it fell behind (the writer then took the faults itself: a third of the CPU at 4 KiB
    batches, in readahead zeroing of the file's holes). The thread reads the writer's position (plain
    attributes, read under the GIL) and sleeps on a threading.Event the writer sets when it crosses
    `wake_offset`."""

    def __init__(
        self,
        mfq: MappedFileQueue,
        ahead: int,
        *,
        populator: Madvise | None = None,
        write_behind: WriteBehind | None = None,
    ) -> None:
        """`write_behind`: kicked after each refill (every `step` bytes appended), started and stopped
        with this service (store.write_behind)."""
        self.mfq = mfq
        self.write_behind = write_behind
        self.ahead = ahead
        # refill once a quarter of the window has been consumed: a refill is one madvise run of ~ahead/4
        self.step = max(OS_PAGE_SIZE, (ahead // 4) - (ahead // 4) % OS_PAGE_SIZE)
        self.populator = populator or Madvise(MADV_POPULATE_WRITE)
        # the writer calls `wakeup` once its end offset reaches this (NO_WAKE while a refill is pending)
        self.wake_offset = NO_WAKE
        self.enabled = ahead > 0
        # False until the first append wakes the service: nothing is populated for a store that is not written
        self.active = False
        self.populated_bytes = 0
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def start(self) -> None:
        if self.enabled and self._thread is None:
            self._stopped = False
            self.wake_offset = 0  # the first append wakes us: an idle store keeps no populated window
            self._thread = threading.Thread(target=self._run, name="commitlog-prefault", daemon=True)
            self._thread.start()
            if self.write_behind is not None:
                self.write_behind.start()

    def wakeup(self) -> None:
        self.active = True
        self.wake_offset = NO_WAKE
        self._wake.set()

    def _is_stopped(self) -> bool:
        return self._stopped

    async def stop(self) -> None:
        self._stopped = True
        self.wake_offset = NO_WAKE
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            # at most one 1 MiB madvise step to wait for; joined off the loop all the same
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 30)
        if self.write_behind is not None:
            await self.write_behind.stop()

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait()
            self._wake.clear()
            if self._stopped or not self.enabled:
                return
            try:
                self.refill()
            except PrefaultUnsupported as exc:
                self._disable(exc)
                return
            except Exception:
                log.exception("commit log pre-fault failed; retrying at the next wake-up")
                time.sleep(0.1)
                self._arm(self.mfq.last_mapped_file())

    def _disable(self, exc: OSError) -> None:
        if self.enabled:
            self.enabled = False
            self.wake_offset = NO_WAKE
            log.warning("commit log pre-faulting disabled: the kernel refused it", error=str(exc))

    def prefault_new_file(self, mf: MappedFile) -> None:
        """The first window of a CommitLog file being created. Blocking: runs in the creating worker
        thread (MappedFileQueue.on_created_blocking), long before the writer reaches the file."""
        if not self.enabled or self._stopped or not self.active:
            return  # before the first append: the writer wakes the service when it reaches the file
        end = min(mf.file_size, self.ahead - self.ahead % OS_PAGE_SIZE)
        try:
            mf.prefaulted_position = self.populator.apply(mf, 0, end, self._is_stopped)
        except PrefaultUnsupported as exc:
            self._disable(exc)

    def refill(self) -> None:
        """Populate the window of the file being written, then arm the writer's wake-up. Blocking: runs
        on the service's thread (tests call it directly)."""
        files = self.mfq.mapped_files
        mf = files[-1] if files else None
        if mf is not None and mf.write_buffer is None and not mf.is_full():
            start = max(mf.prefaulted_position, mf.wrote_position - mf.wrote_position % OS_PAGE_SIZE)
            end = window_end(mf, self.ahead)
            if end > start:
                reached = self.populator.apply(mf, start, end, self._is_stopped)
                if reached > mf.prefaulted_position:
                    self.populated_bytes += reached - max(start, mf.prefaulted_position)
                    mf.prefaulted_position = reached
        self._arm(mf)
        if self.write_behind is not None:
            self.write_behind.kick()  # (the writer crossed another step: start the write-back of what it wrote)

    def _arm(self, mf: MappedFile | None) -> None:
        if self._stopped or not self.enabled:
            self.wake_offset = NO_WAKE
            return
        if mf is None:
            # no file yet (a fresh store starts the service before creating it): the first append wakes us
            self.wake_offset = 0
            return
        if mf.write_buffer is not None or mf.is_full() or mf.prefaulted_position >= mf.file_size:
            # nothing more in this file (pool buffer, written or populated to its end): the first
            # append into the next one wakes us (its first window was populated when it was created)
            self.wake_offset = mf.tail_offset
            return
        # refill once the populated part left ahead of the writer is under ahead - step
        self.wake_offset = mf.file_from_offset + mf.prefaulted_position - self.ahead + self.step
        if mf.file_from_offset + mf.wrote_position >= self.wake_offset:
            # the writer passed it during the refill (its wake-up was off meanwhile): go again
            self.wakeup()
