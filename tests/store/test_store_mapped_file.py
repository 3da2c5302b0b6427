"""MappedFile / MappedFileQueue: names, positions, roll-over, lookup, truncation, deletion."""

from __future__ import annotations

import asyncio
import os

import pytest

from store.mapped_file import MappedFile, offset_to_file_name
from store.mapped_file_queue import MappedFileQueue


def test_file_names_are_20_digit_offsets():
    assert offset_to_file_name(0) == "00000000000000000000"
    assert offset_to_file_name(1073741824) == "00000000001073741824"


def test_append_select_and_read_position(tmp_path):
    mf = MappedFile.create(str(tmp_path / offset_to_file_name(4096)), 4096)
    assert mf.file_from_offset == 4096
    assert mf.append(b"abc") and mf.append(b"defg")
    assert bytes(mf.select(0, 7)) == b"abcdefg"
    assert mf.select(5, 5) is None  # beyond what is written
    assert not mf.append(b"x" * 5000)
    assert mf.read_position == 7
    mf.destroy()
    assert not os.path.exists(mf.file_name)


def test_open_existing_refuses_wrong_size(tmp_path):
    p = tmp_path / offset_to_file_name(0)
    p.write_bytes(b"\0" * 100)
    with pytest.raises(OSError, match="configured mapped file size"):
        MappedFile.open_existing(str(p), 4096)


def test_queue_rolls_over_and_finds_files(tmp_path):
    q = MappedFileQueue(str(tmp_path / "q"), 1024)
    first = q.get_last_mapped_file(0)
    assert first.file_from_offset == 0 and first.first_create_in_queue
    first.append(b"x" * 1024)
    second = q.get_last_mapped_file(0)
    assert second.file_from_offset == 1024
    second.append(b"y" * 10)
    assert q.max_offset() == 1034
    assert q.find_mapped_file_by_offset(1500) is second
    assert q.find_mapped_file_by_offset(5000) is None
    assert q.find_mapped_file_by_offset(5000, True) is first
    assert sorted(os.listdir(tmp_path / "q")) == [offset_to_file_name(0), offset_to_file_name(1024)]


def test_queue_load_and_truncate(tmp_path):
    q = MappedFileQueue(str(tmp_path / "q"), 1024)
    for _ in range(3):
        q.get_last_mapped_file(0).append(b"z" * 1024)
    q.shutdown()
    q2 = MappedFileQueue(str(tmp_path / "q"), 1024)
    q2.load()
    assert [f.file_from_offset for f in q2.mapped_files] == [0, 1024, 2048]
    q2.truncate_dirty_files(1500)
    assert [f.file_from_offset for f in q2.mapped_files] == [0, 1024]
    assert q2.max_offset() == 1500
    assert not os.path.exists(tmp_path / "q" / offset_to_file_name(2048))


def test_queue_load_rejects_foreign_size(tmp_path):
    d = tmp_path / "q"
    d.mkdir()
    (d / offset_to_file_name(0)).write_bytes(b"\0" * 1000)
    (d / offset_to_file_name(1024)).write_bytes(b"\0" * 1024)
    with pytest.raises(OSError, match="mapped file size"):
        MappedFileQueue(str(d), 1024).load()


async def test_async_creation_runs_in_a_worker_thread(tmp_path):
    import threading

    threads = []

    def create_in_thread(fn, *args):
        def run():
            threads.append(threading.current_thread().name)
            return fn(*args)

        return asyncio.get_running_loop().run_in_executor(None, run)

    q = MappedFileQueue(str(tmp_path / "q"), 1024, run_blocking=create_in_thread, allocate_ahead=True)
    mf = await q.get_last_mapped_file_async(0)
    assert mf.file_from_offset == 0
    await asyncio.sleep(0.05)
    # the next file was created ahead, off the loop
    assert os.path.exists(tmp_path / "q" / offset_to_file_name(1024))
    assert threads and all(t != threading.current_thread().name for t in threads)
    mf.append(b"x" * 1024)
    nxt = await q.get_last_mapped_file_async(0)
    assert nxt.file_from_offset == 1024
    q.shutdown()


def test_flush_targets_cover_full_files_then_current(tmp_path):
    q = MappedFileQueue(str(tmp_path / "q"), 8192)
    q.get_last_mapped_file(0).append(b"a" * 8192)
    q.get_last_mapped_file(0).append(b"b" * 100)
    assert q.flush_blocking(0) is False
    assert q.flushed_where == 8192 + 100
    assert q.flush_blocking(0) is True  # nothing left
    q.get_last_mapped_file(0).append(b"c" * 100)
    # least pages: less than one page dirty → nothing to do
    assert q.flush_targets(1) == []
    assert q.flush_targets(0)


def test_delete_expired_by_time_keeps_the_last_file(tmp_path):
    q = MappedFileQueue(str(tmp_path / "q"), 1024)
    for _ in range(3):
        q.get_last_mapped_file(0).append(b"z" * 1024)
    old = 1_000_000
    for f in q.mapped_files:
        os.utime(f.file_name, (old, old))
    now_ms = (old + 3600) * 1000
    assert q.delete_expired_file_by_time(3_600_000 * 2, now_ms, False) == 0
    assert q.delete_expired_file_by_time(1000, now_ms, False) == 2
    assert [f.file_from_offset for f in q.mapped_files] == [2048]


def _find_as_before(q: MappedFileQueue, offset: int, return_first: bool) -> MappedFile | None:
    """The lookup as it was written before its shortcut: range check, index, then a search for holes."""
    files = q.mapped_files
    if not files:
        return None
    first, size = files[0], q.mapped_file_size
    if first.file_from_offset <= offset < files[-1].file_from_offset + size:
        index = offset // size - first.file_from_offset // size
        if 0 <= index < len(files):
            candidate = files[index]
            if candidate.file_from_offset <= offset < candidate.file_from_offset + size:
                return candidate
        for mf in files:
            if mf.file_from_offset <= offset < mf.file_from_offset + size:
                return mf
    return first if return_first else None


def test_lookup_finds_what_the_checked_search_finds(tmp_path):
    """Every offset around six files, after the head was deleted and with a hole in the middle: the same file (or
    None / the first) as the range-checked lookup."""
    q = MappedFileQueue(str(tmp_path / "q"), 1024)
    assert q.find_mapped_file_by_offset(0) is None and q.find_mapped_file_by_offset(0, True) is None
    for _ in range(6):
        q.get_last_mapped_file(0).append(b"w" * 1024)
    q.mapped_files.pop(0)  # the head deleted: files start at 1024
    offsets = range(-1, 6 * 1024 + 40, 7)
    for files in (list(q.mapped_files), [f for f in q.mapped_files if f.file_from_offset != 3072]):  # then a hole
        q.mapped_files = files
        for offset in offsets:
            for return_first in (False, True):
                assert q.find_mapped_file_by_offset(offset, return_first) is _find_as_before(q, offset, return_first)
