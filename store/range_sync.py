"""RangeSync: make only the written range of a mapped CommitLog file durable (msync MS_SYNC on the range).

`fdatasync(fd)` writes back every dirty page of the file. With the pre-fault window (store.prefault) that
includes up to `prefault_ahead_bytes` of populated pages ahead of the writer: MADV_POPULATE_WRITE on a shared
mapping dirties them (zeros), so each flush wrote them to disk, write-protected them again (a TLB flush per
page) and the writer's next copy into each took a write fault on the event loop's thread, then the next flush
wrote the same blocks a second time with the records in them. Measured with 4 KiB batches (bench.store_append
--breakdown): the bytes dirtied came to 1.3x the bytes appended.

Linux's msync(MS_SYNC) on a shared file mapping is `vfs_fsync_range(file, start, end, datasync=1)`: the dirty
pages of that range only, then what fdatasync adds (the journal commit of the allocation, the device cache
flush). That is upstream's flush too (`MappedByteBuffer.force`, a msync of the mapping). The call goes
through ctypes, which releases the GIL (Python's `mmap.flush` holds it for the whole write-back).

A kernel or file system that refuses (EINVAL, ENOSYS, ...) gets one warning line and whole-file fdatasync
from then on for the life of the store.
"""

from __future__ import annotations

import ctypes
import errno
import mmap

import structlog

from store.config import OS_PAGE_SIZE
from store.mapped_file import MappedFile
from store.prefault import Madvise

log = structlog.get_logger(__name__)

MS_SYNC = getattr(mmap, "MS_SYNC", 4)  # linux/mman.h


class RangeSync:
    """`sync(file, start, end)`: [start, end) of `file` on disk (start rounded down to its page). Blocking:
    run in a worker thread, with the file held (`MappedFile.hold`) so that its mapping stays open."""

    def __init__(self) -> None:
        # dlopen(NULL): the interpreter's own symbols (libc's msync), as store.prefault does for madvise
        libc = ctypes.CDLL(None, use_errno=True)
        self._msync = libc.msync
        self._msync.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self._msync.restype = ctypes.c_int
        self.enabled = True
        self.ranged_bytes = 0  # what the ranged syncs covered (tests, bench)

    def sync(self, f: MappedFile, start: int, end: int) -> None:
        if not self.enabled or f.write_buffer is not None:
            # (a pool buffer's file is written by pwrite at commit: fdatasync has only committed pages to write)
            f.fsync()
            return
        start -= start % OS_PAGE_SIZE
        end = min(end, f.file_size)
        if end <= start:
            return
        if self._msync(Madvise.base_address(f) + start, end - start, MS_SYNC) == 0:
            self.ranged_bytes += end - start
            return
        err = ctypes.get_errno()
        if err in (errno.EIO, errno.ENOSPC):
            raise OSError(err, f"msync of {f.file_name} failed: {errno.errorcode.get(err, err)}")
        self.enabled = False
        log.warning(
            "ranged CommitLog flush disabled: whole-file fdatasync from now on",
            error=errno.errorcode.get(err, str(err)),
            file=f.file_name,
        )
        f.fsync()


def range_sync() -> RangeSync | None:
    """The store's RangeSync, or None (whole-file fdatasync) where ctypes cannot reach msync."""
    try:
        return RangeSync()
    except (OSError, AttributeError) as exc:
        log.warning("CommitLog flushes sync whole files: no msync", error=str(exc))
        return None
