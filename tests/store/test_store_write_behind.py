"""The CommitLog's disk writes start while appending (WriteBehind: sync_file_range of the appended pages) and the
flush syncs only the range written since the last one (RangeSync: msync of that range), not the dirty pre-faulted
window ahead of the writer. Page states are read with cachestat(2) (Linux >= 6.5): dirty pages per file range."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
import types

import pytest
from store_helpers import make_msg
from structlog.testing import capture_logs

from store import PutMessageStatus
from store.mapped_file import MappedFile
from store.prefault import MADV_POPULATE_WRITE, Madvise
from store.range_sync import RangeSync
from store.write_behind import WriteBehind, write_behind

MiB = 1024 * 1024
PAGE = 4096
_SYS_CACHESTAT = 451  # x86_64 and arm64 (the generic table)


class _Range(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


class _Stat(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in ("nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")
    ]


_libc = ctypes.CDLL(None, use_errno=True)


def _dirty_pages(fd: int, start: int, length: int) -> int:
    """Dirty page-cache pages of [start, start + length) of `fd` (cachestat), or skip the test."""
    stat = _Stat()
    if _libc.syscall(_SYS_CACHESTAT, fd, ctypes.byref(_Range(start, length)), ctypes.byref(stat), 0) != 0:
        pytest.skip(f"cachestat unavailable: {errno.errorcode.get(ctypes.get_errno())}")
    return stat.nr_dirty


def _populate_supported(mf: MappedFile) -> bool:
    try:
        Madvise(MADV_POPULATE_WRITE).apply(mf, 0, PAGE, lambda: False)
    except OSError:
        return False
    return True


@pytest.fixture
def mapped(tmp_path):
    mf = MappedFile.create(str(tmp_path / "00000000000000000000"), 16 * MiB)
    yield mf
    mf.destroy()


def _append(mf: MappedFile, n: int) -> None:
    mf.view[mf.wrote_position : mf.wrote_position + n] = os.urandom(n)
    mf.wrote_position += n


def test_write_behind_starts_the_write_back_of_whole_appended_pages(mapped):
    _append(mapped, 8 * MiB + 100)
    assert _dirty_pages(mapped.fd, 0, 8 * MiB) == 2048
    wb = WriteBehind(types.SimpleNamespace(mapped_files=[mapped]), Madvise(4))  # MADV_DONTNEED

    wb.write_behind()

    # every whole page went to write-back (dirty no more), the page still being appended to stays dirty
    assert _dirty_pages(mapped.fd, 0, 8 * MiB) == 0
    assert _dirty_pages(mapped.fd, 8 * MiB, PAGE) == 1
    assert mapped.write_behind_position == 8 * MiB == wb.started_bytes
    assert mapped.released_position == 8 * MiB  # unmapped first: no write-protect fault per page
    assert bytes(mapped.view[:16]) == os.pread(mapped.fd, 16, 0)

    # the next call starts where this one stopped; a flushed file is left alone
    _append(mapped, 4 * MiB)
    wb.write_behind()
    assert mapped.write_behind_position == 12 * MiB and wb.started_bytes == 12 * MiB
    mapped.flushed_position = mapped.file_size
    _append(mapped, MiB)
    wb.write_behind()
    assert wb.started_bytes == 12 * MiB


def test_a_refused_sync_file_range_turns_the_service_off_with_one_warning(mapped, monkeypatch):
    wb = WriteBehind(types.SimpleNamespace(mapped_files=[mapped]), None)

    def refuse(*_args):
        ctypes.set_errno(errno.ENOSYS)
        return -1

    monkeypatch.setattr(wb, "_sync_file_range", refuse)
    _append(mapped, MiB)
    wb.start()
    assert wb._thread is None  # (started by the first kick: an idle store keeps no thread for it)
    with capture_logs() as logs:
        wb.kick()
        wb._thread.join(5)
    assert not wb.enabled and not wb._thread.is_alive()
    assert [e["event"] for e in logs] == ["CommitLog write-behind disabled"]
    assert mapped.write_behind_position == 0


def test_the_ranged_flush_leaves_the_prefaulted_window_dirty(mapped):
    if not _populate_supported(mapped):
        pytest.skip("MADV_POPULATE_WRITE unsupported")
    _append(mapped, MiB)
    Madvise(MADV_POPULATE_WRITE).apply(mapped, MiB, 5 * MiB, lambda: False)  # the window ahead: dirty zeros
    assert _dirty_pages(mapped.fd, MiB, 4 * MiB) == 1024
    sync = RangeSync()

    sync.sync(mapped, 0, MiB)

    assert _dirty_pages(mapped.fd, 0, MiB) == 0  # the written range is on disk
    assert _dirty_pages(mapped.fd, MiB, 4 * MiB) == 1024  # the window was not written (a whole-file fdatasync did)
    assert sync.ranged_bytes == MiB
    mapped.fsync()
    assert _dirty_pages(mapped.fd, MiB, 4 * MiB) == 0


def _failing_msync(err: int):
    """A stand-in for libc's msync that fails with ``err``, as ctypes with use_errno=True would see it."""

    def msync(*_args):
        ctypes.set_errno(err)
        return -1

    return msync


def test_a_refused_msync_falls_back_to_fdatasync_with_one_warning(mapped, monkeypatch):
    sync = RangeSync()
    monkeypatch.setattr(sync, "_msync", _failing_msync(errno.EINVAL))
    _append(mapped, MiB)
    with capture_logs() as logs:
        sync.sync(mapped, 0, MiB)
        sync.sync(mapped, 0, MiB)
    assert not sync.enabled
    assert [e["event"] for e in logs] == ["ranged CommitLog flush disabled: whole-file fdatasync from now on"]
    assert _dirty_pages(mapped.fd, 0, MiB) == 0  # the fallback synced it


def test_msync_io_errors_reach_the_flush(mapped, monkeypatch):
    sync = RangeSync()
    monkeypatch.setattr(sync, "_msync", _failing_msync(errno.EIO))
    _append(mapped, MiB)
    with pytest.raises(OSError):
        sync.sync(mapped, 0, MiB)
    assert sync.enabled


async def test_a_store_writes_behind_its_appends_and_flushes_only_the_written_range(store_factory, config_factory):
    cfg = config_factory(
        mapped_file_size_commit_log=64 * MiB, prefault_ahead_bytes=8 * MiB, flush_interval_commit_log=600_000
    )
    store = await store_factory(cfg)
    behind = store._prefault.write_behind if store._prefault is not None else None
    if behind is None:
        pytest.skip("no pre-fault service here (MADV_POPULATE_WRITE unsupported)")
    body = os.urandom(4000)
    for _ in range(48):  # 48 batches of 32 x ~4 KiB: ~6.5 MiB, several quarters of the window
        r = await store.put_messages([make_msg(body=body) for _ in range(32)])
        assert r.status == PutMessageStatus.PUT_OK
    mf = store.commit_log.mapped_file_queue.last_mapped_file()
    for _ in range(200):
        if behind.started_bytes >= 4 * MiB:
            break
        await asyncio.sleep(0.01)
    assert behind.started_bytes >= 4 * MiB
    assert _dirty_pages(mf.fd, 0, mf.write_behind_position) == 0  # nothing left there for the flush to wait for

    await store._flusher.flush(0)

    assert mf.flushed_position == mf.wrote_position
    assert store._flusher.range_sync.ranged_bytes >= mf.wrote_position - PAGE
    assert _dirty_pages(mf.fd, 0, mf.wrote_position) == 0


async def test_write_behind_is_off_when_configured_off(store_factory, config_factory):
    store = await store_factory(config_factory(commit_log_write_behind=False))
    assert store._prefault is None or store._prefault.write_behind is None
    assert write_behind(store.commit_log.mapped_file_queue) is not None  # (available here: off by the key only)
