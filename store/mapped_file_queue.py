"""MappedFileQueue: an ordered run of equally sized MappedFiles forming one logical byte space.

Files are named by their 20-digit start offset. The queue finds the file for an offset, rolls over to a
new file, truncates dirty tails after recovery, deletes expired heads, and tracks `flushed_where` /
`committed_where`. New files are created in a worker thread (`get_last_mapped_file_async`) and, for the
CommitLog, the next file is pre-created ahead so the writer rarely waits (upstream AllocateMappedFileService).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from store.mapped_file import MappedFile, offset_to_file_name

log = structlog.get_logger(__name__)

RunBlocking = Callable[..., Awaitable[Any]]
DELETE_FILES_BATCH_MAX = 10


class MappedFileQueue:
    def __init__(
        self,
        store_path: str,
        mapped_file_size: int,
        *,
        run_blocking: RunBlocking | None = None,
        preallocate: bool = False,
        warm: bool = False,
        allocate_ahead: bool = False,
        on_new_file: Callable[[MappedFile], None] | None = None,
        unlink: Callable[[str], object] | None = None,
    ) -> None:
        self.store_path = store_path
        self.mapped_file_size = mapped_file_size
        self.mapped_files: list[MappedFile] = []
        self.flushed_where = 0
        self.committed_where = 0
        self.store_timestamp = 0
        self._run_blocking = run_blocking
        self._preallocate = preallocate
        self._warm = warm
        self._allocate_ahead = allocate_ahead
        self._on_new_file = on_new_file
        # retention unlinks through this (a worker thread in the store): unlinking 1 GiB takes a while
        self._unlink = unlink
        # called in the creating worker thread on each new file (the CommitLog pre-fault service sets it)
        self.on_created_blocking: Callable[[MappedFile], None] | None = None
        # path → future of a file being created in a worker thread
        self._allocating: dict[str, asyncio.Future[MappedFile]] = {}

    # ------------------------------------------------------------------------------------------- load
    def load(self) -> None:
        """Map every file of the directory (blocking). All positions start at the file size; recovery
        then sets the real ones. A file whose size differs from the configured one is an error."""
        if not os.path.isdir(self.store_path):
            return
        names = sorted(n for n in os.listdir(self.store_path) if n.isdigit() and len(n) == 20)
        for name in names:
            path = os.path.join(self.store_path, name)
            size = os.path.getsize(path)
            if size != self.mapped_file_size:
                if size == 0 and name == names[-1]:
                    # a crash right after creating the last file; it never held data
                    os.unlink(path)
                    continue
                if size < self.mapped_file_size and name == names[-1]:
                    # the last file lost its end (truncated copy, crash while creating it): restore the
                    # size with zeros; recovery then stops at the last complete record
                    log.warning("last mapped file is short, extending it", file=path, size=size)
                    os.truncate(path, self.mapped_file_size)
                    self.mapped_files.append(MappedFile.open_existing(path, self.mapped_file_size))
                    continue
                raise OSError(
                    f"{path} is {size} bytes but the configured mapped file size is {self.mapped_file_size}; "
                    "check mappedFileSize* settings"
                )
            self.mapped_files.append(MappedFile.open_existing(path, self.mapped_file_size))

    # -------------------------------------------------------------------------------------- accessors
    def first_mapped_file(self) -> MappedFile | None:
        return self.mapped_files[0] if self.mapped_files else None

    def last_mapped_file(self) -> MappedFile | None:
        return self.mapped_files[-1] if self.mapped_files else None

    def min_offset(self) -> int:
        first = self.first_mapped_file()
        return first.file_from_offset if first is not None else -1

    def max_offset(self) -> int:
        """Readable end of the queue (upstream getMaxOffset: read position of the last file)."""
        last = self.last_mapped_file()
        return last.file_from_offset + last.read_position if last is not None else 0

    def max_wrote_offset(self) -> int:
        last = self.last_mapped_file()
        return last.file_from_offset + last.wrote_position if last is not None else 0

    def remain_how_many_data_to_commit(self) -> int:
        return self.max_wrote_offset() - self.committed_where

    def remain_how_many_data_to_flush(self) -> int:
        return self.max_offset() - self.flushed_where

    def find_mapped_file_by_offset(self, offset: int, return_first_on_not_found: bool = False) -> MappedFile | None:
        """The file holding ``offset``. Two or more lookups per pull (its consume-queue file, its records' commit-log
        file): the file the index says is checked first, in as few bytecodes as that takes (~45, where the range
        checks before it took ~70); any other case (before the first file, past the last, a hole after a deletion in
        the middle) takes the checked search, which only a file that holds the offset passes."""
        files = self.mapped_files
        if not files:
            return None
        size = self.mapped_file_size
        index = (offset - files[0].file_from_offset) // size  # file offsets are multiples of the file size
        if 0 <= index < len(files):
            candidate = files[index]
            start = candidate.file_from_offset
            if start <= offset < start + size:
                return candidate
        first = files[0]
        if first.file_from_offset <= offset < files[-1].file_from_offset + size:
            for mf in files:  # holes after a deletion in the middle; not expected
                if mf.file_from_offset <= offset < mf.file_from_offset + size:
                    return mf
        return first if return_first_on_not_found else None

    def _next_file_offset(self, start_offset: int) -> int | None:
        """Start offset of the file to create, or None if the last one is still writable."""
        last = self.last_mapped_file()
        if last is None:
            return start_offset - start_offset % self.mapped_file_size
        if last.is_full():
            return last.file_from_offset + self.mapped_file_size
        return None

    def _path(self, offset: int) -> str:
        return os.path.join(self.store_path, offset_to_file_name(offset))

    def _create_blocking(self, path: str) -> MappedFile:
        mf = MappedFile.create(path, self.mapped_file_size, preallocate=self._preallocate, warm=self._warm)
        hook = self.on_created_blocking
        if hook is not None:
            hook(mf)
        return mf

    def _install(self, mf: MappedFile) -> MappedFile:
        if not self.mapped_files:
            mf.first_create_in_queue = True
        self.mapped_files.append(mf)
        if self._on_new_file is not None:
            self._on_new_file(mf)
        return mf

    # --------------------------------------------------------------------------------------- creation
    def get_last_mapped_file(self, start_offset: int = 0, need_create: bool = True) -> MappedFile | None:
        """The writable last file, created synchronously if needed (small files: CQ, tests)."""
        create_offset = self._next_file_offset(start_offset)
        if create_offset is None:
            return self.last_mapped_file()
        if not need_create:
            return self.last_mapped_file()
        path = self._path(create_offset)
        pending = self._allocating.pop(path, None)
        if pending is not None and pending.done() and pending.exception() is None:
            return self._install(pending.result())
        return self._install(self._create_blocking(path))

    async def get_last_mapped_file_async(self, start_offset: int = 0) -> MappedFile:
        """The writable last file; a new one is created in a worker thread (the loop never blocks on it)."""
        create_offset = self._next_file_offset(start_offset)
        if create_offset is None:
            last = self.last_mapped_file()
            assert last is not None
            return last
        path = self._path(create_offset)
        fut = self._allocating.pop(path, None)
        if fut is None:
            fut = self._submit_create(path)
        mf = await fut
        # another coroutine may have installed a file meanwhile (should not happen: one writer per queue)
        last = self.last_mapped_file()
        if last is not None and last.file_from_offset >= mf.file_from_offset:
            return last
        self._install(mf)
        if self._allocate_ahead:
            self.allocate_ahead()
        return mf

    def allocate_ahead(self) -> None:
        """Start creating the file after the current last one (no-op without a loop or when pending)."""
        if self._run_blocking is None:
            return
        last = self.last_mapped_file()
        next_offset = last.file_from_offset + self.mapped_file_size if last is not None else 0
        path = self._path(next_offset)
        if path not in self._allocating:
            self._allocating[path] = self._submit_create(path)

    def _submit_create(self, path: str) -> asyncio.Future[MappedFile]:
        if self._run_blocking is None:
            loop = asyncio.get_running_loop()
            fut: asyncio.Future[MappedFile] = loop.create_future()
            try:
                fut.set_result(self._create_blocking(path))
            except OSError as exc:
                fut.set_exception(exc)
            return fut
        return asyncio.ensure_future(self._run_blocking(self._create_blocking, path))

    # -------------------------------------------------------------------------------------- truncation
    def truncate_dirty_files(self, offset: int) -> None:
        """Drop everything at and after `offset` (recovery)."""
        keep: list[MappedFile] = []
        for mf in self.mapped_files:
            if mf.tail_offset > offset:
                if offset >= mf.file_from_offset:
                    mf.set_positions(offset % self.mapped_file_size)
                    keep.append(mf)
                else:
                    mf.destroy()
            else:
                keep.append(mf)
        self.mapped_files = keep
        self._drop_allocations()

    def delete_last_mapped_file(self) -> None:
        if self.mapped_files:
            self.mapped_files.pop().destroy()

    def _drop_allocations(self) -> None:
        for fut in self._allocating.values():
            fut.add_done_callback(_destroy_unused)
        self._allocating.clear()

    # ---------------------------------------------------------------------------------------- deletion
    def delete_expired_file_by_time(
        self, expired_ms: int, now_ms: int, clean_immediately: bool, max_files: int = DELETE_FILES_BATCH_MAX
    ) -> int:
        """Delete leading files (never the last) whose mtime + expired_ms has passed; stop at the first live one."""
        deleted: list[MappedFile] = []
        for mf in self.mapped_files[:-1]:
            if now_ms >= mf.last_modified_timestamp() + expired_ms or clean_immediately:
                deleted.append(mf)
                if len(deleted) >= max_files:
                    break
            else:
                break
        return self._delete_head(deleted)

    def delete_expired_file_by_offset(self, offset: int, unit_size: int) -> int:
        """Consume-queue retention: delete leading files whose last entry points below `offset`."""
        from store.consume_queue import read_entry_offset

        deleted: list[MappedFile] = []
        for mf in self.mapped_files[:-1]:
            last_entry = read_entry_offset(mf.view, self.mapped_file_size - unit_size)
            if last_entry < offset:
                deleted.append(mf)
            else:
                break
        return self._delete_head(deleted)

    def _delete_head(self, deleted: list[MappedFile]) -> int:
        if not deleted:
            return 0
        gone = set(map(id, deleted))
        self.mapped_files = [mf for mf in self.mapped_files if id(mf) not in gone]
        for mf in deleted:
            log.info("delete expired file", file=mf.file_name)
            mf.destroy(self._unlink)
        return len(deleted)

    def destroy(self) -> None:
        for mf in self.mapped_files:
            mf.destroy()
        self.mapped_files = []
        self._drop_allocations()
        self.flushed_where = self.committed_where = 0
        try:
            os.rmdir(self.store_path)
        except OSError:
            pass

    def shutdown(self) -> None:
        for mf in self.mapped_files:
            mf.shutdown()
        for fut in self._allocating.values():
            fut.add_done_callback(_shutdown_unused)
        self._allocating.clear()

    # -------------------------------------------------------------------------------- commit and flush
    def commit_targets(self, least_pages: int) -> list[tuple[MappedFile, int, int]]:
        """(file, start, end) ranges of pool buffers to copy into their files, oldest first."""
        out: list[tuple[MappedFile, int, int]] = []
        mf = self.find_mapped_file_by_offset(self.committed_where, self.committed_where == 0)
        if mf is None:
            return out
        start_index = self.mapped_files.index(mf)
        for f in self.mapped_files[start_index:]:
            if f.write_buffer is None:
                # written directly (no buffer, e.g. the pool was empty): committed == wrote
                f.committed_position = f.wrote_position
            elif f.is_able_to_commit(least_pages) and f.wrote_position > f.committed_position:
                out.append((f, f.committed_position, f.wrote_position))
            if not f.is_full():
                break
        return out

    def apply_commit(self, done: list[tuple[MappedFile, int, int]]) -> None:
        for f, _start, end in done:
            f.finish_commit(end)
        self._advance_committed_where()

    def _advance_committed_where(self) -> None:
        where = self.committed_where
        for f in self.mapped_files:
            if f.tail_offset <= where:
                continue
            if f.file_from_offset > where:
                break
            pos = f.read_position
            where = f.file_from_offset + pos
            if pos < f.file_size:
                break
        self.committed_where = where

    def flush_targets(self, least_pages: int) -> list[tuple[MappedFile, int]]:
        """(file, position) pairs that an fsync should cover, oldest first; capture on the loop."""
        out: list[tuple[MappedFile, int]] = []
        mf = self.find_mapped_file_by_offset(self.flushed_where, self.flushed_where == 0)
        if mf is None:
            return out
        start_index = self.mapped_files.index(mf)
        for f in self.mapped_files[start_index:]:
            target = f.read_position
            if target > f.flushed_position and f.is_able_to_flush(least_pages):
                out.append((f, target))
            if target < f.file_size:
                break
        return out

    def apply_flush(self, done: list[tuple[MappedFile, int]], store_timestamp: int) -> None:
        for f, target in done:
            f.flushed_position = max(f.flushed_position, target)
        where = self.flushed_where
        for f in self.mapped_files:
            if f.tail_offset <= where:
                continue
            if f.file_from_offset > where:
                break
            where = f.file_from_offset + f.flushed_position
            if f.flushed_position < f.file_size:
                break
        self.flushed_where = where
        if store_timestamp > 0:
            self.store_timestamp = store_timestamp

    def flush_blocking(self, least_pages: int = 0) -> bool:
        """Synchronous flush for recovery/shutdown paths running in a worker thread or before the loop."""
        targets = self.flush_targets(least_pages)
        ts = self.last_mapped_file().store_timestamp if self.mapped_files else 0
        for f, _ in targets:
            if f.hold():
                try:
                    f.fsync()
                finally:
                    f.release()
        self.apply_flush(targets, ts)
        return not targets


def _destroy_unused(fut: asyncio.Future[MappedFile]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        fut.result().destroy()


def _shutdown_unused(fut: asyncio.Future[MappedFile]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        fut.result().shutdown()
