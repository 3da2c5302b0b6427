"""A clean restart checks the CommitLog's end with ``pread``, not through the mapping (``store.recovery._probe``).

A first read fault in a mapping reads around it (``read_ahead_kb``, 8 MiB on the development machine's disk): the
two 8-byte probes of a clean restart (the end of the last file, the head of the next, pre-allocated one, both
never-written holes) put 2 x 2048 zero pages into the page cache and took ~5 ms each before the ports opened.
The test drops the files' pages from the page cache, reloads the store, and counts the pages resident again.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

import pytest
from store_helpers import make_msg

from store import MessageStore, PutMessageStatus

MiB = 1024 * 1024
PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)


def resident_pages(path: Path) -> int:
    """Pages of ``path`` in the page cache (``mincore`` over a mapping of it; mapping faults nothing in)."""
    size = path.stat().st_size
    pages = (size + PAGE - 1) // PAGE
    vec = (ctypes.c_ubyte * pages)()
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), size) as mm:
        anchor = ctypes.c_char.from_buffer(mm)  # the mapping's address (writable mappings only; nothing written)
        try:
            if _libc.mincore(ctypes.addressof(anchor), size, vec) != 0:
                raise OSError(ctypes.get_errno(), "mincore")
        finally:
            del anchor
    return sum(b & 1 for b in vec)


def drop_from_page_cache(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def mapped_read_around(tmp_path: Path) -> int:
    """Pages one read fault in a hole of a fresh file brings in on this machine's disk."""
    path = tmp_path / "hole"
    with open(path, "wb") as f:
        f.truncate(64 * MiB)
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 64 * MiB) as mm:
        assert mm[:8] == bytes(8)
    try:
        return resident_pages(path)
    finally:
        path.unlink()


async def test_a_clean_restart_does_not_read_around_the_commit_log_end(config_factory, tmp_path: Path):
    read_around = mapped_read_around(tmp_path)
    if read_around < 64:
        pytest.skip(f"a mapped read fault brings in only {read_around} pages here: the probe cannot be told apart")
    cfg = config_factory(mapped_file_size_commit_log=64 * MiB)
    s = MessageStore(cfg)
    assert await s.load()
    await s.start()
    for i in range(3):
        assert (await s.put_message(make_msg(body=b"x" * 300, keys=f"k{i}"))).status == PutMessageStatus.PUT_OK
    await s.shutdown()
    files = sorted(Path(cfg.store_path_root_dir, "commitlog").iterdir())
    for path in files:
        drop_from_page_cache(path)
    s = MessageStore(cfg)
    try:
        assert await s.load()
        assert s.last_recovery["startFile"] == "checkpoint"  # the clean path, which probes
        resident = {path.name: resident_pages(path) for path in files if path.exists()}
    finally:
        await s.shutdown()
    assert all(n < read_around // 4 for n in resident.values()), (resident, read_around)


async def test_a_restart_scans_the_consume_queues_without_reading_around(config_factory, tmp_path: Path):
    """``store.consume_queue._no_read_around``: a queue holding a few entries brought its whole 6 MB file
    (mostly never written) into the page cache when a restart scanned for its end (~5 ms a queue)."""
    read_around = mapped_read_around(tmp_path)
    if read_around < 64:
        pytest.skip(f"a mapped read fault brings in only {read_around} pages here: the scan cannot be told apart")
    cfg = config_factory(mapped_file_size_consume_queue=300_000 * 20)
    s = MessageStore(cfg)
    assert await s.load()
    await s.start()
    for q in range(3):
        assert (await s.put_message(make_msg(body=b"x" * 100, queue_id=q))).status == PutMessageStatus.PUT_OK
    await s.shutdown()
    files = sorted(p for p in Path(cfg.store_path_root_dir, "consumequeue").rglob("0*") if p.is_file())
    assert len(files) == 3
    for path in files:
        drop_from_page_cache(path)
    s = MessageStore(cfg)
    try:
        assert await s.load()
        assert s.get_max_offset_in_queue("T", 2) == 1
        resident = {str(path.relative_to(cfg.store_path_root_dir)): resident_pages(path) for path in files}
    finally:
        await s.shutdown()
    assert all(n < read_around // 4 for n in resident.values()), (resident, read_around)
