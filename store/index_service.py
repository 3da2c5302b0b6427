"""IndexFile and IndexService: the hash index behind QUERY_MESSAGE (by key and by unique key).

Upstream layout (protocol §6): a 40-byte header (beginTimestamp, endTimestamp, beginPhyOffset,
endPhyOffset: int64; hashSlotCount, indexCount: int32, indexCount starting at 1), `maxHashSlotNum`
int32 slots holding the newest entry number of their chain (0 = empty), then `maxIndexNum` 20-byte
entries `int32 keyHash | int64 phyOffset | int32 seconds since beginTimestamp | int32 previous entry`.
keyHash = abs(String.hashCode(topic + "#" + key)); files are named yyyyMMddHHmmssSSS (local time).
Keys indexed per message: its UNIQ_KEY and each space-separated KEYS value (not for rolled-back
transactions). New files are created in a worker thread; the full file is flushed in the background.
"""

from __future__ import annotations

import asyncio
import os
import struct
import time
from collections.abc import Callable
from functools import cache, partial

import numpy as np
import structlog

from store.checkpoint import StoreCheckpoint
from store.config import MessageStoreConfig
from store.java_hash import JavaHasher, index_key_hash
from store.mapped_file import MappedFile
from store.mapped_file_queue import RunBlocking
from store.message import MessageConst

log = structlog.get_logger(__name__)

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0
_HEADER = struct.Struct(">qqqqii")
_SLOT = struct.Struct(">i")
_ENTRY = struct.Struct(">iqii")


def _as_list(values: list[int] | np.ndarray) -> list[int]:
    """``values`` as a list (read only). A list is checked first: a round of a few sends never has an array,
    and asking numpy (``np.ndarray``) would import it on the loop at a fresh broker's first send."""
    if type(values) is list:
        return values
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def index_keys(topic: str, uniq_key: str | None, keys: str | None) -> list[str]:
    """topic#key for the UNIQ_KEY and each KEYS value (the caller skips rolled-back transactions)."""
    out: list[str] = []
    if uniq_key:
        out.append(f"{topic}#{uniq_key}")
    if keys:
        out.extend(f"{topic}#{k}" for k in keys.split(MessageConst.KEY_SEPARATOR) if k)
    return out


# an index entry as numpy sees it (for the vectorised batch insert)
@cache
def _entry_dtype() -> np.dtype:
    # built at first use, not at import: a start that indexes nothing does not import numpy (broker.deferred_import)
    dtype = np.dtype([("hash", ">i4"), ("phy", ">i8"), ("time", ">i4"), ("prev", ">i4")])
    assert dtype.itemsize == INDEX_SIZE
    return dtype


_VECTOR_MIN = 16  # below this many keys the scalar insert is cheaper


def time_millis_to_human_string(ms: int) -> str:
    """UtilAll.timeMillisToHumanString: yyyyMMddHHmmssSSS in local time."""
    t = time.localtime(ms / 1000)
    return time.strftime("%Y%m%d%H%M%S", t) + f"{ms % 1000:03d}"


class IndexFile:
    def __init__(self, mf: MappedFile, hash_slot_num: int, index_num: int) -> None:
        self.mapped_file = mf
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.begin_timestamp = 0
        self.end_timestamp = 0
        self.begin_phy_offset = 0
        self.end_phy_offset = 0
        self.hash_slot_count = 0
        self.index_count = 1

    @staticmethod
    def file_size(hash_slot_num: int, index_num: int) -> int:
        return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE

    @property
    def file_name(self) -> str:
        return self.mapped_file.file_name

    def load(self) -> None:
        (
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        ) = _HEADER.unpack_from(self.mapped_file.view, 0)
        if self.index_count <= 0:
            self.index_count = 1
        # a corrupt header must never make us write past the end of the file
        self.index_count = min(self.index_count, self.index_num + 1)

    def init_new(self, end_phy_offset: int, end_timestamp: int) -> None:
        if end_phy_offset > 0:
            self.begin_phy_offset = self.end_phy_offset = end_phy_offset
        if end_timestamp > 0:
            self.begin_timestamp = self.end_timestamp = end_timestamp
        self.write_header()

    def write_header(self) -> None:
        _HEADER.pack_into(
            self.mapped_file.view,
            0,
            self.begin_timestamp,
            self.end_timestamp,
            self.begin_phy_offset,
            self.end_phy_offset,
            self.hash_slot_count,
            self.index_count,
        )

    def is_write_full(self) -> bool:
        return self.index_count >= self.index_num

    def put_hashed(self, key_hash: int, phy_offset: int, store_timestamp: int) -> bool:
        """Add one entry; the header in the file is updated by `write_header` (once per batch)."""
        if self.index_count >= self.index_num:
            return False
        slot_pos = key_hash % self.hash_slot_num
        abs_slot = INDEX_HEADER_SIZE + slot_pos * HASH_SLOT_SIZE
        view = self.mapped_file.view
        (slot_value,) = _SLOT.unpack_from(view, abs_slot)
        if slot_value <= INVALID_INDEX or slot_value > self.index_count:
            slot_value = INVALID_INDEX
        time_diff = (store_timestamp - self.begin_timestamp) // 1000
        if self.begin_timestamp <= 0 or time_diff < 0:
            time_diff = 0
        elif time_diff > 0x7FFFFFFF:
            time_diff = 0x7FFFFFFF
        abs_index = INDEX_HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE + self.index_count * INDEX_SIZE
        _ENTRY.pack_into(view, abs_index, key_hash, phy_offset, time_diff, slot_value)
        _SLOT.pack_into(view, abs_slot, self.index_count)
        if self.index_count <= 1:
            self.begin_phy_offset = phy_offset
            self.begin_timestamp = store_timestamp
        if slot_value == INVALID_INDEX:
            self.hash_slot_count += 1
        self.index_count += 1
        self.end_phy_offset = phy_offset
        self.end_timestamp = store_timestamp
        return True

    def put_many(self, hashes: np.ndarray, phys: np.ndarray, times: np.ndarray) -> int:
        """Add entries for many (already abs) key hashes at once; exactly what `put_hashed` in a loop
        would write. Returns how many fit (the rest need the next file)."""
        total = len(hashes)
        done = 0
        # the first entry of a file sets beginTimestamp, which the time diffs of the others use
        while done < total and (self.index_count <= 1 or total - done < _VECTOR_MIN):
            if not self.put_hashed(int(hashes[done]), int(phys[done]), int(times[done])):
                return done
            done += 1
        n = min(total - done, self.index_num - self.index_count)
        if n <= 0:
            return done
        h = hashes[done : done + n]
        phy = phys[done : done + n]
        ts = times[done : done + n]
        count = self.index_count
        view = self.mapped_file.view
        slots_arr = np.frombuffer(view, dtype=">i4", count=self.hash_slot_num, offset=INDEX_HEADER_SIZE)
        entries = np.frombuffer(
            view,
            dtype=_entry_dtype(),
            count=self.index_num,
            offset=INDEX_HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE,
        )
        slots = h % self.hash_slot_num
        numbers = np.arange(count, count + n, dtype=np.int64)  # entry number = index_count at its insert
        order = np.argsort(slots, kind="stable")
        s_sorted = slots[order]
        n_sorted = numbers[order]
        first = np.ones(n, dtype=bool)
        first[1:] = s_sorted[1:] != s_sorted[:-1]
        current = slots_arr[s_sorted].astype(np.int64)
        # a chain head from before the batch, unless it is out of range (as put_hashed checks it)
        head = np.where((current <= INVALID_INDEX) | (current > n_sorted), INVALID_INDEX, current)
        prev_sorted = np.empty(n, dtype=np.int64)
        prev_sorted[first] = head[first]
        prev_sorted[~first] = n_sorted[np.flatnonzero(~first) - 1]  # the previous entry of this batch
        prev = np.empty(n, dtype=np.int64)
        prev[order] = prev_sorted
        diff = (ts - self.begin_timestamp) // 1000
        if self.begin_timestamp <= 0:
            diff[:] = 0
        else:
            np.clip(diff, 0, 0x7FFFFFFF, out=diff)
        out = entries[count : count + n]
        out["hash"] = h
        out["phy"] = phy
        out["time"] = diff
        out["prev"] = prev
        last = np.ones(n, dtype=bool)
        last[:-1] = s_sorted[1:] != s_sorted[:-1]
        slots_arr[s_sorted[last]] = n_sorted[last]
        self.hash_slot_count += int(np.count_nonzero(first & (head == INVALID_INDEX)))
        self.index_count = count + n
        self.end_phy_offset = int(phy[-1])
        self.end_timestamp = int(ts[-1])
        return done + n

    def is_time_matched(self, begin: int, end: int) -> bool:
        b, e = self.begin_timestamp, self.end_timestamp
        return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)

    def select_phy_offsets(self, out: list[int], key: str, max_num: int, begin: int, end: int) -> None:
        key_hash = index_key_hash(key)
        slot_pos = key_hash % self.hash_slot_num
        view = self.mapped_file.view
        (slot_value,) = _SLOT.unpack_from(view, INDEX_HEADER_SIZE + slot_pos * HASH_SLOT_SIZE)
        if slot_value <= INVALID_INDEX or slot_value > self.index_count or self.index_count <= 1:
            return
        base = INDEX_HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE
        next_index = slot_value
        visited = 0
        while len(out) < max_num and visited <= self.index_num:
            visited += 1
            hash_read, phy_read, time_diff, prev = _ENTRY.unpack_from(view, base + next_index * INDEX_SIZE)
            if time_diff < 0:
                break
            time_read = self.begin_timestamp + time_diff * 1000
            if hash_read == key_hash and begin <= time_read <= end:
                out.append(phy_read)
            if prev <= INVALID_INDEX or prev > self.index_count or prev == next_index or time_read < begin:
                break
            next_index = prev

    def flush_blocking(self) -> None:
        if self.mapped_file.hold():
            try:
                self.mapped_file.fsync()
            finally:
                self.mapped_file.release()


class IndexService:
    def __init__(self, config: MessageStoreConfig, *, run_blocking: RunBlocking, now_ms: Callable[[], int]) -> None:
        self.config = config
        self.hash_slot_num = config.max_hash_slot_num
        self.index_num = config.max_index_num
        self.store_path = config.store_path_index
        self.run_blocking = run_blocking
        self.now_ms = now_ms
        self.index_files: list[IndexFile] = []
        self._creating: asyncio.Future | None = None
        self._hasher = JavaHasher()
        self._pending_keys: list[tuple[int, int, int]] = []  # (index hash, phy, store ts)

    @property
    def _file_size(self) -> int:
        return IndexFile.file_size(self.hash_slot_num, self.index_num)

    # -------------------------------------------------------------------------------------- lifecycle
    def load(self, last_exit_ok: bool, checkpoint: StoreCheckpoint) -> None:
        """Map every index file (blocking). Unlike upstream we keep files written after the checkpoint on
        an abnormal start: a query checks every hit against the CommitLog, and the reput adds what they
        lack."""
        if not os.path.isdir(self.store_path):
            return
        for name in sorted(os.listdir(self.store_path)):
            path = os.path.join(self.store_path, name)
            if not name.isdigit() or not os.path.isfile(path):
                continue
            try:
                mf = MappedFile.open_existing(path, self._file_size)
            except OSError as exc:
                log.error("load index file failed, ignoring it", file=path, error=str(exc))
                continue
            f = IndexFile(mf, self.hash_slot_num, self.index_num)
            f.load()
            self.index_files.append(f)

    def rebuild_from(self) -> int:
        """CommitLog offset the reput must replay from for the index, -1 if the index is complete
        enough (it is written in the same dispatch as the consume queues)."""
        return -1 if self.index_files else 0

    def truncate_beyond(self, offset: int) -> None:
        """The CommitLog was cut at `offset`: the records written there next must be indexed."""
        if self.index_files and self.index_files[-1].end_phy_offset > offset:
            self.index_files[-1].end_phy_offset = offset

    def shutdown(self) -> None:
        for f in self.index_files:
            f.mapped_file.shutdown()

    def destroy(self) -> None:
        for f in self.index_files:
            f.mapped_file.destroy()
        self.index_files.clear()

    # ---------------------------------------------------------------------------------------- building
    def room(self) -> int:
        """How many more keys the current file takes (0 without a file)."""
        if not self.index_files:
            return 0
        f = self.index_files[-1]
        return max(0, f.index_num - f.index_count)

    def needs_file(self) -> bool:
        return bool(self._pending_keys) or not self.index_files or self.index_files[-1].is_write_full()

    async def ensure_file(self) -> None:
        """Create the next index file in a worker thread and flush the full one in the background; then
        index the keys that waited for it, creating as many files as they fill."""
        while True:
            if not self.index_files or self.index_files[-1].is_write_full():
                if self._creating is None:
                    await self._create_next_file()
                else:
                    await asyncio.shield(self._creating)
            pending, self._pending_keys = self._pending_keys, []
            if pending:
                hashes, phys, times = (list(column) for column in zip(*pending))
                self.build_hashed(hashes, phys, times)
            if not self._pending_keys:
                return

    async def _create_next_file(self) -> None:
        prev = self.index_files[-1] if self.index_files else None
        path = await self._next_file_path()
        slots_end = INDEX_HEADER_SIZE + self.hash_slot_num * HASH_SLOT_SIZE
        self._creating = creating = asyncio.ensure_future(
            self.run_blocking(partial(MappedFile.create, warm_prefix=slots_end), path, self._file_size)
        )
        try:
            mf = await creating
        finally:
            self._creating = None
        f = IndexFile(mf, self.hash_slot_num, self.index_num)
        f.init_new(prev.end_phy_offset if prev else 0, prev.end_timestamp if prev else 0)
        self.index_files.append(f)
        if prev is not None:
            asyncio.ensure_future(self.run_blocking(prev.flush_blocking))

    async def _next_file_path(self) -> str:
        """The next file's name: the time in milliseconds (upstream), unique among the files."""

        def taken(path: str) -> bool:
            return any(f.file_name == path for f in self.index_files) or os.path.exists(path)

        path = os.path.join(self.store_path, time_millis_to_human_string(self.now_ms()))
        for _ in range(3):  # two files within one millisecond (tiny test files): the next one
            if not taken(path):
                return path
            await asyncio.sleep(0.001)
            path = os.path.join(self.store_path, time_millis_to_human_string(self.now_ms()))
        while taken(path):
            path += "0"  # (a clock that does not move: keep the name unique all the same)
        return path

    def build_keys(self, keys: list[str], phys: list[int], times: list[int]) -> None:
        """Index `keys[i]` → `phys[i]` stored at `times[i]`, in CommitLog order: one hashing pass and
        one vectorised insert for the whole round."""
        if not keys:
            return
        if len(keys) < _VECTOR_MIN:
            self.build_hashed([index_key_hash(k) for k in keys], phys, times)
        else:
            self.build_hashed(self._hasher.abs_hashes(keys), phys, times)

    def build_hashed(
        self, hashes: list[int] | np.ndarray, phys: list[int] | np.ndarray, times: list[int] | np.ndarray
    ) -> None:
        """`build_keys` with the index hashes (abs String.hashCode of topic#key) already computed."""
        n = len(hashes)
        if not n:
            return
        if not self.index_files or self._pending_keys:
            self._pending_keys.extend(zip(_as_list(hashes), _as_list(phys), _as_list(times)))
            return
        end_phy = self.index_files[-1].end_phy_offset
        if phys[0] < end_phy:  # a replay: skip what the index holds already
            keep = np.asarray(phys) >= end_phy
            hashes, phys, times = np.asarray(hashes)[keep], np.asarray(phys)[keep], np.asarray(times)[keep]
            n = len(hashes)
            if not n:
                return
        f = self.index_files[-1]
        if n < _VECTOR_MIN:
            done = n
            for i, (h, phy, ts) in enumerate(zip(_as_list(hashes), _as_list(phys), _as_list(times))):
                if not f.put_hashed(h, phy, ts):
                    done = i
                    break
        else:
            done = f.put_many(
                np.asarray(hashes, dtype=np.int64), np.asarray(phys, dtype=np.int64), np.asarray(times, dtype=np.int64)
            )
        f.write_header()
        if done < n:
            # the file filled up in the middle: the rest waits for the next file (ensure_file)
            self._pending_keys.extend(zip(_as_list(hashes[done:]), _as_list(phys[done:]), _as_list(times[done:])))

    def has_pending(self) -> bool:
        return bool(self._pending_keys)

    # ----------------------------------------------------------------------------------------- queries
    def query_offset(self, topic: str, key: str, max_num: int, begin: int, end: int) -> tuple[list[int], int, int]:
        offsets: list[int] = []
        last_ts = last_phy = 0
        max_num = min(max_num, self.config.max_msgs_num_batch)
        idx_key = f"{topic}#{key}"
        files = self.index_files
        for i in range(len(files) - 1, -1, -1):
            f = files[i]
            if i == len(files) - 1:
                last_ts, last_phy = f.end_timestamp, f.end_phy_offset
            if f.is_time_matched(begin, end):
                f.select_phy_offsets(offsets, idx_key, max_num, begin, end)
            if f.begin_timestamp < begin or len(offsets) >= max_num:
                break
        return offsets, last_ts, last_phy

    # ---------------------------------------------------------------------------------------- flushing
    async def flush(self, checkpoint: StoreCheckpoint | None) -> None:
        """Flush the current file; the checkpoint's index timestamp then covers what it held."""
        if not self.index_files:
            return
        f = self.index_files[-1]
        end_ts = f.end_timestamp
        await self.run_blocking(f.flush_blocking)
        if checkpoint is not None and end_ts > 0:
            checkpoint.index_msg_timestamp = end_ts

    async def flush_all(self) -> None:
        for f in list(self.index_files):
            await self.run_blocking(f.flush_blocking)

    def delete_expired_file(self, offset: int, unlink: Callable[[str], object] | None = None) -> int:
        """Delete leading files (never the last) whose entries all point below `offset`."""
        doomed: list[IndexFile] = []
        for f in self.index_files[:-1]:
            if f.end_phy_offset < offset:
                doomed.append(f)
            else:
                break
        for f in doomed:
            self.index_files.remove(f)
            f.mapped_file.destroy(unlink)
        return len(doomed)
