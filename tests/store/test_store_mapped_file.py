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
