"""ConsumeQueue: the per (topic, queue) index of CommitLog positions, as numpy arrays over mmap.

Each file holds `mapped_file_size_consume_queue / 20` entries of upstream's 20-byte big-endian layout
`int64 commitLogOffset | int32 size | int64 tagsCode`, exposed as a structured array with dtype
`CQ_DTYPE` so that pulls read a window of entries and filter the tags column in one vectorised step.
Logical offset = byte position / 20 over the whole queue. Holes before the first entry of a queue whose
first file starts late are filled with (0, 2**31-1, 0) as upstream does.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import struct
from collections.abc import Callable, Collection, Iterator, Sequence

import numpy as np
import structlog

from store.config import CQ_STORE_UNIT_SIZE
from store.mapped_file import MappedFile
from store.mapped_file_queue import MappedFileQueue, RunBlocking
from store.path_guard import queue_dir

log = structlog.get_logger(__name__)


@functools.cache
def cq_dtype() -> np.dtype:
    """One consume-queue entry as numpy sees it. Built at first use, not at import: a start that reads no consume
    queue does not import numpy (``broker.deferred_import``)."""
    dtype = np.dtype([("offset", ">i8"), ("size", ">i4"), ("tags", ">i8")])
    assert dtype.itemsize == CQ_STORE_UNIT_SIZE
    return dtype


def __getattr__(name: str):
    if name == "CQ_DTYPE":
        return cq_dtype()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_ENTRY = struct.Struct(">qiq")
_OFFSET = struct.Struct(">q")
_BLANK_ENTRY = _ENTRY.pack(0, 0x7FFFFFFF, 0)


def read_entry_offset(view: memoryview, pos: int) -> int:
    return _OFFSET.unpack_from(view, pos)[0]


# Entries looked at per step when a boot scans a queue file (80 KiB): a boot touches the pages a queue uses,
# not its whole 6 MB file, so hundreds of queues do not page in gigabytes (issue 13 item 5).
SCAN_CHUNK_ENTRIES = 4096


@contextlib.contextmanager
def _no_read_around(files: Sequence[MappedFile]) -> Iterator[None]:
    """Read faults in ``files`` bring in only their own page while the block runs (``MADV_RANDOM``).

    A restart scans the end of every consume queue through its mapping. The first read fault of a mapping
    reads around it (``read_ahead_kb``: 8 MiB on this machine's disk), which took a whole 6 MB file of mostly
    never-written zero pages into the page cache for a queue holding a few entries: ~5 ms per queue before the
    ports opened (200 queues: ~1.1 s and 1.1 GB of page cache). Afterwards the files read around again, as a
    consumer's sequential reads of a cold backlog want."""
    advised = []
    try:
        for mf in files:
            with contextlib.suppress(AttributeError, OSError, ValueError):
                mf.mm.madvise(mmap.MADV_RANDOM)
                advised.append(mf)
        yield
    finally:
        for mf in advised:
            with contextlib.suppress(AttributeError, OSError, ValueError):
                mf.mm.madvise(mmap.MADV_NORMAL)


def first_index(arr: np.ndarray, predicate: Callable[[np.ndarray], np.ndarray], want: bool) -> int:
    """Index of the first entry whose predicate is `want`, else len(arr); reads chunk by chunk and stops there."""
    for start in range(0, len(arr), SCAN_CHUNK_ENTRIES):
        hits = predicate(arr[start : start + SCAN_CHUNK_ENTRIES])
        if want and hits.any():
            return start + int(np.argmax(hits))
        if not want and not hits.all():
            return start + int(np.argmin(hits))
    return len(arr)


def _is_entry(entries: np.ndarray) -> np.ndarray:
    return (entries["offset"] >= 0) & (entries["size"] > 0)


def tags_to_int32(tags: np.ndarray) -> np.ndarray:
    """J compares `(int) tagsCode`: the low 32 bits as a signed int."""
    return tags.astype(np.int64).astype(np.int32)


@functools.lru_cache(maxsize=64)
def _entries(n: int) -> struct.Struct:
    """n consume queue entries back to back: a batch's entries go in with one pack_into."""
    return struct.Struct(">" + "qiq" * n)


def _interleave(offsets: list[int], sizes: list[int], tags: list[int]) -> list[int]:
    """[offset0, size0, tags0, offset1, ...]: three slice assignments, no Python loop per entry."""
    flat = [0] * (3 * len(offsets))
    flat[0::3] = offsets
    flat[1::3] = sizes
    flat[2::3] = tags
    return flat


class ConsumeQueue:
    def __init__(
        self,
        topic: str,
        queue_id: int,
        store_path: str,
        mapped_file_size: int,
        *,
        run_blocking: RunBlocking | None = None,
        unlink: Callable[[str], object] | None = None,
    ) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self.mapped_file_size = mapped_file_size
        self.entries_per_file = mapped_file_size // CQ_STORE_UNIT_SIZE
        self.queue_dir = queue_dir(store_path, topic, queue_id)  # UnsafeStorePath for a name outside the store
        self.mapped_file_queue = MappedFileQueue(
            self.queue_dir, mapped_file_size, run_blocking=run_blocking, unlink=unlink
        )
        self.max_physic_offset = -1  # CommitLog end (offset + size) of the last entry
        self.min_logic_offset = 0  # bytes
        self._arrays: dict[int, np.ndarray] = {}

    # ------------------------------------------------------------------------------------------- arrays
    def array_of(self, mf: MappedFile) -> np.ndarray:
        arr = self._arrays.get(mf.file_from_offset)
        if arr is None or arr.base is None:
            arr = np.frombuffer(mf.view, dtype=cq_dtype())
            self._arrays[mf.file_from_offset] = arr
        return arr

    def _forget(self, mf: MappedFile) -> None:
        self._arrays.pop(mf.file_from_offset, None)

    # -------------------------------------------------------------------------------------- lifecycle
    def load(self) -> None:
        self.mapped_file_queue.load()

    def recover(self) -> None:
        """Find the end of the written entries in the last three files (entries with offset >= 0 and
        size > 0), like upstream, but with a vectorised scan per file."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            return
        index = max(0, len(files) - 3)
        with _no_read_around(files[index:]):
            self._recover_from(files, index)

    def _recover_from(self, files: list[MappedFile], index: int) -> None:
        while True:
            mf = files[index]
            arr = self.array_of(mf)
            n = first_index(arr, _is_entry, False)
            if n > 0:
                last = arr[n - 1]
                self.max_physic_offset = int(last["offset"]) + int(last["size"])
            if n == len(arr) and index + 1 < len(files):
                index += 1
                continue
            process_offset = mf.file_from_offset + n * CQ_STORE_UNIT_SIZE
            break
        self.mapped_file_queue.flushed_where = process_offset
        self.mapped_file_queue.committed_where = process_offset
        self._truncate_files_to(process_offset)

    def _truncate_files_to(self, process_offset: int) -> None:
        mfq = self.mapped_file_queue
        for mf in mfq.mapped_files:
            if mf.file_from_offset > process_offset:
                self._forget(mf)
        mfq.truncate_dirty_files(process_offset)
        last = mfq.last_mapped_file()
        if last is not None:
            # zero whatever a torn write left after the end so a later recovery cannot read it as entries
            # (chunk by chunk up to the first chunk of zeros: the file's untouched tail is never read)
            stale = self.array_of(last)[last.wrote_position // CQ_STORE_UNIT_SIZE :]
            for start in range(0, len(stale), SCAN_CHUNK_ENTRIES):
                chunk = stale[start : start + SCAN_CHUNK_ENTRIES]
                if not (chunk["size"] != 0).any():
                    break
                chunk.fill(0)

    def shutdown(self) -> None:
        self._arrays.clear()
        self.mapped_file_queue.shutdown()

    def destroy(self) -> None:
        self.max_physic_offset = -1
        self.min_logic_offset = 0
        self._arrays.clear()
        self.mapped_file_queue.destroy()
        try:
            os.rmdir(os.path.dirname(self.queue_dir))
        except OSError:
            pass

    # ---------------------------------------------------------------------------------------- offsets
    def get_min_offset_in_queue(self) -> int:
        return self.min_logic_offset // CQ_STORE_UNIT_SIZE

    def get_max_offset_in_queue(self) -> int:
        return self.mapped_file_queue.max_offset() // CQ_STORE_UNIT_SIZE

    def get_message_total_in_queue(self) -> int:
        return self.get_max_offset_in_queue() - self.get_min_offset_in_queue()

    def roll_next_file(self, index: int) -> int:
        n = self.entries_per_file
        return index + n - index % n

    # ------------------------------------------------------------------------------------------ writes
    def needs_file_for(self, cq_offset: int) -> bool:
        """True if writing entry `cq_offset` needs a file that does not exist yet."""
        mfq = self.mapped_file_queue
        last = mfq.last_mapped_file()
        if last is None or last.is_full():
            return True
        return cq_offset * CQ_STORE_UNIT_SIZE >= last.tail_offset

    async def ensure_file_for(self, cq_offset: int) -> None:
        """Create the file entry `cq_offset` goes to, in a worker thread."""
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        mfq = self.mapped_file_queue
        while self.needs_file_for(cq_offset):
            last = mfq.last_mapped_file()
            if last is not None and not last.is_full() and expect >= last.tail_offset:
                # a gap bigger than the current file: fill it so the queue stays contiguous
                self._fill_blank(last, last.file_size)
                continue
            await mfq.get_last_mapped_file_async(expect)

    def try_append(self, offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """The common case of `put_message_position_info` (the next entry of a file that has room, not
        the first entry of a file); False → the caller takes the general path."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            return False
        mf = files[-1]
        pos = mf.wrote_position
        if (
            pos == 0
            or pos + CQ_STORE_UNIT_SIZE > mf.file_size
            or mf.file_from_offset + pos != cq_offset * CQ_STORE_UNIT_SIZE
            or offset + size <= self.max_physic_offset
        ):
            return False
        _ENTRY.pack_into(mf.write_view, pos, offset, size, tags_code)
        mf.wrote_position = mf.committed_position = pos + CQ_STORE_UNIT_SIZE
        self.max_physic_offset = offset + size
        return True

    def try_append_many(self, offsets: list[int], sizes: list[int], tags: list[int], cq_offset: int) -> bool:
        """`try_append` for consecutive entries from `cq_offset` (a batch of one queue): all of them when
        they fit in the current file after its first entry, else none (False: the caller goes entry by
        entry)."""
        files = self.mapped_file_queue.mapped_files
        if not files:
            return False
        mf = files[-1]
        pos = mf.wrote_position
        end = pos + len(offsets) * CQ_STORE_UNIT_SIZE
        if (
            pos == 0
            or end > mf.file_size
            or mf.file_from_offset + pos != cq_offset * CQ_STORE_UNIT_SIZE
            or offsets[0] + sizes[0] <= self.max_physic_offset
        ):
            return False
        _entries(len(offsets)).pack_into(mf.write_view, pos, *_interleave(offsets, sizes, tags))
        mf.wrote_position = mf.committed_position = end
        self.max_physic_offset = offsets[-1] + sizes[-1]
        return True

    async def put_entries(self, phy: np.ndarray, size: np.ndarray, tags: np.ndarray, cq_offset: np.ndarray) -> int:
        """`put_message_position_info` for many entries in CommitLog order (the bulk reput): runs of
        consecutive entries go in with one slice assignment, files are created as needed (in a worker
        thread). Returns how many entries failed (logged by the caller)."""
        keep = phy + size > self.max_physic_offset  # replay: entries built already
        if not keep.all():
            phy, size, tags, cq_offset = phy[keep], size[keep], tags[keep], cq_offset[keep]
        n = len(phy)
        failed = 0
        i = 0
        while i < n:
            first = int(cq_offset[i])
            if self.needs_file_for(first):
                await self.ensure_file_for(first)
            mf = self.mapped_file_queue.mapped_files[-1]
            pos = mf.wrote_position
            run = 0
            if pos != 0 and mf.file_from_offset + pos == first * CQ_STORE_UNIT_SIZE:
                run = min(n - i, (mf.file_size - pos) // CQ_STORE_UNIT_SIZE)
                seg = cq_offset[i : i + run]
                breaks = np.flatnonzero(seg != np.arange(first, first + run, dtype=np.int64))
                if breaks.size:
                    run = int(breaks[0])
            if run == 0:  # the first entry of a file, a gap, a repeat: the general path, one entry
                if not self.put_message_position_info(int(phy[i]), int(size[i]), int(tags[i]), first):
                    failed += 1
                i += 1
                continue
            at = pos // CQ_STORE_UNIT_SIZE
            out = self.array_of(mf)[at : at + run]
            out["offset"] = phy[i : i + run]
            out["size"] = size[i : i + run]
            out["tags"] = tags[i : i + run]
            mf.wrote_position = mf.committed_position = pos + run * CQ_STORE_UNIT_SIZE
            self.max_physic_offset = int(phy[i + run - 1]) + int(size[i + run - 1])
            i += run
        return failed

    def put_message_position_info(self, offset: int, size: int, tags_code: int, cq_offset: int) -> bool:
        """Append one entry (upstream putMessagePositionInfo). The file must exist (`ensure_file_for`).

        Returns True when the entry is written or was already there (rebuild/replay)."""
        if offset + size <= self.max_physic_offset:
            return True  # built already (replay after recovery)
        expect = cq_offset * CQ_STORE_UNIT_SIZE
        mfq = self.mapped_file_queue
        mf = mfq.last_mapped_file()
        if mf is None or mf.is_full() or expect >= mf.tail_offset:
            mf = mfq.get_last_mapped_file(expect)
            if mf is None:
                return False
        if mf.first_create_in_queue and cq_offset != 0 and mf.wrote_position == 0 and mfq.mapped_files[0] is mf:
            # the queue starts late (its head expired, or a rebuild from a later CommitLog offset)
            self.min_logic_offset = expect
            mfq.flushed_where = mfq.committed_where = expect
            self._fill_blank(mf, expect % self.mapped_file_size)
            log.info("fill pre blank space", topic=self.topic, queue_id=self.queue_id, until=expect)
        if cq_offset != 0:
            current = mf.wrote_position + mf.file_from_offset
            if expect < current:
                return True  # repeated build
            if expect != current:
                log.warning(
                    "logic queue order maybe wrong",
                    topic=self.topic,
                    queue_id=self.queue_id,
                    expect=expect,
                    current=current,
                )
                if expect > current and expect < mf.tail_offset:
                    self._fill_blank(mf, expect - mf.file_from_offset)
        pos = mf.wrote_position
        if pos + CQ_STORE_UNIT_SIZE > mf.file_size:
            return False
        _ENTRY.pack_into(mf.write_view, pos, offset, size, tags_code)
        mf.wrote_position = pos + CQ_STORE_UNIT_SIZE
        mf.committed_position = mf.wrote_position
        self.max_physic_offset = offset + size
        return True

    def _fill_blank(self, mf: MappedFile, until_pos: int) -> None:
        while mf.wrote_position < until_pos:
            mf.append(_BLANK_ENTRY)
        mf.committed_position = mf.wrote_position

    # ------------------------------------------------------------------------------------------- reads
    def get_entries(self, index: int, max_entries: int | None = None) -> np.ndarray | None:
        """Entries from logical `index` to the end of what is written in that file (upstream
        getIndexBuffer), at most `max_entries`; a view over the mapping. None if not readable."""
        byte_offset = index * CQ_STORE_UNIT_SIZE
        if byte_offset < self.min_logic_offset:
            return None
        mf = self.mapped_file_queue.find_mapped_file_by_offset(byte_offset)
        if mf is None:
            return None
        start = (byte_offset - mf.file_from_offset) // CQ_STORE_UNIT_SIZE
        end = mf.read_position // CQ_STORE_UNIT_SIZE
        if start >= end:
            return None
        if max_entries is not None:
            end = min(end, start + max_entries)
        return self.array_of(mf)[start:end]

    def get_entry(self, index: int) -> tuple[int, int, int] | None:
        """(commitLogOffset, size, tagsCode) of one readable entry (struct, not numpy: one entry)."""
        byte_offset = index * CQ_STORE_UNIT_SIZE
        if index < 0 or byte_offset < self.min_logic_offset:
            return None
        mf = self.mapped_file_queue.find_mapped_file_by_offset(byte_offset)
        if mf is None:
            return None
        pos = byte_offset - mf.file_from_offset
        if pos + CQ_STORE_UNIT_SIZE > mf.read_position:
            return None
        return _ENTRY.unpack_from(mf.view, pos)

    def filter_window(self, index: int, count: int, code_set: Collection[int] | None) -> np.ndarray:
        """Logical offsets in [index, index+count) whose tag code matches (vectorised; spans files)."""
        out: list[np.ndarray] = []
        pos = index
        end = index + count
        codes = None if code_set is None else np.fromiter(code_set, dtype=np.int32)
        while pos < end:
            entries = self.get_entries(pos, end - pos)
            if entries is None:
                break
            if codes is None:
                hits = np.arange(len(entries), dtype=np.int64)
            else:
                hits = np.flatnonzero(np.isin(tags_to_int32(entries["tags"]), codes))
            out.append(hits + pos)
            pos += len(entries)
        return np.concatenate(out) if out else np.empty(0, dtype=np.int64)

    def get_offset_in_queue_by_time(
        self, timestamp: int, pickup_store_timestamp: Callable[[int, int], int], min_physic_offset: int
    ) -> int:
        """Upstream getOffsetInQueueByTime: the file whose mtime >= timestamp (else the last), then a binary
        search over its entries reading store timestamps from the CommitLog; nearest match wins."""
        mfq = self.mapped_file_queue
        target = None
        for mf in mfq.mapped_files:
            if mf.last_modified_timestamp() >= timestamp:
                target = mf
                break
        if target is None:
            target = mfq.last_mapped_file()
        if target is None:
            return 0
        arr = self.array_of(target)[: target.read_position // CQ_STORE_UNIT_SIZE]
        if not len(arr):
            return 0
        low = 0
        if self.min_logic_offset > target.file_from_offset:
            low = (self.min_logic_offset - target.file_from_offset) // CQ_STORE_UNIT_SIZE
        high = len(arr) - 1
        offsets = arr["offset"]
        sizes = arr["size"]
        left = right = -1
        left_value = right_value = -1
        found = -1
        while high >= low:
            mid = (low + high) // 2
            phy = int(offsets[mid])
            if phy < min_physic_offset:
                low = mid + 1
                left = mid
                continue
            store_time = pickup_store_timestamp(phy, int(sizes[mid]))
            if store_time < 0:
                return 0
            if store_time == timestamp:
                found = mid
                break
            if store_time > timestamp:
                high = mid - 1
                right, right_value = mid, store_time
            else:
                low = mid + 1
                left, left_value = mid, store_time
        if found != -1:
            offset = found
        elif left_value == -1:
            offset = right
        elif right_value == -1:
            offset = left
        else:
            offset = right if abs(timestamp - left_value) > abs(timestamp - right_value) else left
        offset = max(offset, 0)
        return (target.file_from_offset // CQ_STORE_UNIT_SIZE) + offset

    def last_entry(self) -> tuple[int, int, int] | None:
        max_offset = self.get_max_offset_in_queue()
        if max_offset <= self.get_min_offset_in_queue():
            return None
        return self.get_entry(max_offset - 1)

    # ------------------------------------------------------------------------------------- truncation
    def truncate_dirty_logic_files(self, phy_offset: int) -> None:
        """Drop entries pointing at or beyond `phy_offset` (CommitLog truncated by recovery)."""
        mfq = self.mapped_file_queue
        while True:
            mf = mfq.last_mapped_file()
            if mf is None:
                self.max_physic_offset = -1
                return
            arr = self.array_of(mf)[: mf.wrote_position // CQ_STORE_UNIT_SIZE]
            if len(arr) and int(arr[0]["offset"]) >= phy_offset and arr[0]["size"] != 0x7FFFFFFF:
                self._forget(mf)
                mfq.delete_last_mapped_file()
                continue
            valid = (arr["offset"] >= 0) & (arr["size"] > 0)
            keep_mask = valid & ((arr["offset"] < phy_offset) | (arr["size"] == 0x7FFFFFFF))
            n = int(np.argmin(keep_mask)) if not keep_mask.all() else len(arr)
            new_pos = n * CQ_STORE_UNIT_SIZE
            if new_pos < mf.wrote_position:
                self.array_of(mf)[n : mf.wrote_position // CQ_STORE_UNIT_SIZE].fill(0)
            mf.set_positions(new_pos)
            real = arr[:n][arr[:n]["size"] != 0x7FFFFFFF]
            self.max_physic_offset = int(real[-1]["offset"]) + int(real[-1]["size"]) if len(real) else -1
            if mf.file_from_offset + new_pos < mfq.flushed_where:
                mfq.flushed_where = mfq.committed_where = mf.file_from_offset + new_pos
            return

    def correct_min_offset(self, phy_min_offset: int) -> None:
        """Set the min logical offset to the first entry whose CommitLog offset is still present."""
        mf = self.mapped_file_queue.first_mapped_file()
        if mf is None:
            return
        arr = self.array_of(mf)[: mf.read_position // CQ_STORE_UNIT_SIZE]
        if not len(arr):
            self.min_logic_offset = max(self.min_logic_offset, mf.file_from_offset)
            return
        first = first_index(arr, lambda e: (e["offset"] >= phy_min_offset) & (e["size"] != 0x7FFFFFFF), True)
        if first < len(arr):
            self.min_logic_offset = mf.file_from_offset + first * CQ_STORE_UNIT_SIZE
        else:
            # every entry of the first file is gone: the queue starts after it
            self.min_logic_offset = mf.file_from_offset + len(arr) * CQ_STORE_UNIT_SIZE

    def delete_expired_file(self, phy_min_offset: int) -> int:
        before = list(self.mapped_file_queue.mapped_files)
        count = self.mapped_file_queue.delete_expired_file_by_offset(phy_min_offset, CQ_STORE_UNIT_SIZE)
        if count:
            for mf in before[:count]:
                self._forget(mf)
        self.correct_min_offset(phy_min_offset)
        return count
