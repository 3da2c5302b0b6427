"""TransientStorePool: CommitLog-file-sized buffers in anonymous memory, locked with mlock.

With `transientStorePoolEnable` the writer appends into one of these buffers instead of the mapped file;
the commit service later copies the bytes into the file (so readers only see committed bytes) and the
buffer returns to the pool once its file is full and committed. `init()` allocates and locks the buffers
(blocking; run it in a worker thread). If the OS refuses mlock (RLIMIT_MEMLOCK is small for non-root
users) we log one clear line and keep the buffers unlocked.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
from collections import deque
from collections.abc import Callable

import structlog

log = structlog.get_logger(__name__)


class TransientStorePool:
    def __init__(self, pool_size: int, file_size: int, *, drained: Callable[[], bool] = lambda: False) -> None:
        self.pool_size = pool_size
        self.file_size = file_size
        self._available: deque[mmap.mmap] = deque()
        self._all: list[mmap.mmap] = []
        self._pins: list[ctypes.Array] = []  # keep exported views alive while locked
        self._drained = drained
        self.locked = False
        self._libc = None

    def init(self) -> None:
        """Allocate and mlock `pool_size` buffers. Blocking."""
        for _ in range(self.pool_size):
            buf = mmap.mmap(-1, self.file_size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            self._all.append(buf)
            self._available.append(buf)
        self.locked = self._lock_all()

    def _lock_all(self) -> bool:
        name = ctypes.util.find_library("c") or "libc.so.6"
        try:
            libc = ctypes.CDLL(name, use_errno=True)
        except OSError as exc:
            log.warning("transient store pool: cannot load libc, buffers stay unlocked", error=str(exc))
            return False
        self._libc = libc
        libc.mlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.munlock.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        for buf in self._all:
            pin = (ctypes.c_char * self.file_size).from_buffer(buf)
            if libc.mlock(ctypes.addressof(pin), self.file_size) != 0:
                err = ctypes.get_errno()
                del pin
                self._unlock_all()
                log.warning(
                    "transient store pool: mlock refused, buffers stay unlocked "
                    "(raise RLIMIT_MEMLOCK / ulimit -l to lock them)",
                    errno=err,
                    buffers=self.pool_size,
                    buffer_bytes=self.file_size,
                )
                return False
            self._pins.append(pin)
        log.info("transient store pool locked", buffers=self.pool_size, buffer_bytes=self.file_size)
        return True

    def _unlock_all(self) -> None:
        if self._libc is not None:
            for pin in self._pins:
                self._libc.munlock(ctypes.addressof(pin), self.file_size)
        self._pins.clear()

    def destroy(self) -> None:
        self._unlock_all()
        for buf in self._all:
            try:
                buf.close()
            except BufferError:
                pass  # a mapped file still uses it; it goes with that file
        self._all.clear()
        self._available.clear()
        self.locked = False

    def borrow_buffer(self) -> mmap.mmap | None:
        if self._drained() or not self._available:
            return None
        buf = self._available.popleft()
        if len(self._available) < self.pool_size * 0.4:
            log.warning("TransientStorePool only remain sheets", remain=len(self._available))
        return buf

    def return_buffer(self, buf: mmap.mmap) -> None:
        self._available.appendleft(buf)

    def available_buffer_nums(self) -> int:
        return 0 if self._drained() else len(self._available)
