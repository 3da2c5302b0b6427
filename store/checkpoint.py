"""StoreCheckpoint: the 4 KiB `checkpoint` file recording how far each structure is durable.

Upstream layout: int64 physicMsgTimestamp @0, logicsMsgTimestamp @8, indexMsgTimestamp @16. Upstream
readers ignore the rest of the page; the Python store adds, after the marker "PYCKPT01" @24, one field of
its own: @32 `clean_max_offset`, the CommitLog end written by a clean shutdown and cleared (-1) at start,
so that a clean restart needs no scan (a crash leaves -1 and an abort file behind).
"""

from __future__ import annotations

import mmap
import os
import struct

from store.config import OS_PAGE_SIZE

_TS = struct.Struct(">qqq")
_EXT = struct.Struct(">8sq")
_EXT_MAGIC = b"PYCKPT01"


class StoreCheckpoint:
    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        exists = os.path.exists(path)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(self._fd).st_size < OS_PAGE_SIZE:
            os.ftruncate(self._fd, OS_PAGE_SIZE)
        self._mm = mmap.mmap(self._fd, OS_PAGE_SIZE)
        self.physic_msg_timestamp = 0
        self.logics_msg_timestamp = 0
        self.index_msg_timestamp = 0
        self.clean_max_offset = -1
        if exists:
            self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = _TS.unpack_from(
                self._mm, 0
            )
            magic, clean = _EXT.unpack_from(self._mm, 24)
            if magic == _EXT_MAGIC:
                self.clean_max_offset = clean

    def min_timestamp(self) -> int:
        """Upstream getMinTimestamp: min(physic, logics) - 3 s."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    def min_timestamp_index(self) -> int:
        return min(self.min_timestamp(), self.index_msg_timestamp)

    def write(self) -> None:
        """Copy the fields into the mapping (cheap, on the loop)."""
        _TS.pack_into(self._mm, 0, self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp)
        _EXT.pack_into(self._mm, 24, _EXT_MAGIC, self.clean_max_offset)

    def fsync(self) -> None:
        """Blocking: run in a worker thread (or at shutdown)."""
        os.fdatasync(self._fd)

    def flush(self) -> None:
        self.write()
        self.fsync()

    def close(self) -> None:
        try:
            self._mm.close()
        finally:
            os.close(self._fd)
