"""The CommitLog pre-fault service: populates a window ahead of the writer, never the whole file, leaves
the data intact, turns itself off when the kernel refuses, stops with the store."""

from __future__ import annotations

import asyncio
import os
import threading
import time

import pytest
from store_helpers import make_msg, small_config

import store.message_store as message_store_module
from store import MessageStore, PutMessageStatus
from store.commit_log import AppendRequest
from store.config import StoreConfigError
from store.mapped_file import MappedFile
from store.prefault import NO_WAKE, Madvise, PrefaultService, PrefaultUnsupported

MiB = 1024 * 1024


def _supported(tmp_path) -> bool:
    mf = MappedFile.create(str(tmp_path / "probe" / "00000000000000000000"), 64 * 1024)
    try:
        Madvise().apply(mf, 0, 4096, lambda: False)
        return True
    except PrefaultUnsupported:
        return False
    finally:
        mf.destroy()


@pytest.fixture
def needs_populate_write(tmp_path):
    if not _supported(tmp_path):
        pytest.skip("the kernel has no MADV_POPULATE_WRITE (Linux < 5.14)")


def _allocated(path: str) -> int:
    return os.stat(path).st_blocks * 512


def test_populate_allocates_only_the_window_and_keeps_contents(tmp_path, needs_populate_write):
    mf = MappedFile.create(str(tmp_path / "cl" / "00000000000000000000"), 8 * MiB)
    try:
        data = os.urandom(300_000)
        mf.append(data)
        reached = Madvise().apply(mf, 0, 1 * MiB, lambda: False)
        assert reached == 1 * MiB
        assert bytes(mf.view[: len(data)]) == data
        assert bytes(mf.view[len(data) : 1 * MiB]) == bytes(1 * MiB - len(data))
        # the window got its blocks, the rest of the 8 MiB file stays a hole
        assert 1 * MiB <= _allocated(mf.file_name) <= 1 * MiB + 256 * 1024
    finally:
        mf.destroy()


def test_populate_stops_when_asked(tmp_path, needs_populate_write):
    mf = MappedFile.create(str(tmp_path / "cl" / "00000000000000000000"), 8 * MiB)
    try:
        assert Madvise().apply(mf, 0, 8 * MiB, lambda: True) == 0
        assert _allocated(mf.file_name) == 0
    finally:
        mf.destroy()


def test_populate_racing_the_writer_keeps_every_byte(tmp_path, needs_populate_write):
    """Populate-write over the pages the writer is filling at the same time changes nothing."""
    size = 16 * MiB
    mf = MappedFile.create(str(tmp_path / "cl" / "00000000000000000000"), size)
    chunk = os.urandom(1000)  # not page aligned: records straddle pages being populated
    n = size // len(chunk)
    populator = Madvise()

    def writer() -> None:
        for _ in range(n):
            assert mf.append(chunk)

    try:
        t = threading.Thread(target=writer)
        t.start()
        for _ in range(3):
            populator.apply(mf, 0, size, lambda: False)
        t.join()
        view = mf.view
        for i in range(n):
            assert view[i * len(chunk) : (i + 1) * len(chunk)] == chunk, f"record {i} changed"
    finally:
        mf.destroy()


async def test_store_keeps_a_window_ahead_of_the_writer(tmp_path, needs_populate_write):
    ahead = 256 * 1024
    cfg = small_config(tmp_path, mapped_file_size_commit_log=4 * MiB, prefault_ahead_bytes=ahead)
    store = MessageStore(cfg)
    assert await store.load()
    await store.start()
    svc = store._prefault
    assert svc is not None and svc.enabled
    body = os.urandom(3000)
    try:
        for i in range(1200):  # ~3.7 MB: past the first window and over the file's end into the next one
            r = await store.put_message(make_msg(body=body, keys=f"k{i}"))
            assert r.status == PutMessageStatus.PUT_OK
            if i % 100 == 0:
                await asyncio.sleep(0.02)  # let the worker run (generous: the machine is shared)
        for _ in range(200):
            mf = store.commit_log.mapped_file_queue.last_mapped_file()
            if mf.prefaulted_position >= min(mf.file_size, mf.wrote_position + ahead - svc.step):
                break
            await asyncio.sleep(0.02)
        files = store.commit_log.mapped_file_queue.mapped_files
        mf = files[-1]
        # the refills followed the writer ...
        assert mf.prefaulted_position > ahead or len(files) > 1
        assert mf.prefaulted_position >= min(mf.file_size, mf.wrote_position + ahead - svc.step)
        # ... but never went further than one window past it
        assert mf.prefaulted_position <= mf.wrote_position + ahead
        data = store.commit_log.get_max_offset()
        disk = sum(_allocated(f.file_name) for f in files)
        for path in store.commit_log.mapped_file_queue._allocating:  # the next file, created ahead
            if os.path.exists(path):
                disk += _allocated(path)
        assert disk <= data + 3 * ahead + 64 * 1024, (disk, data)
        # every message reads back intact
        got = store.get_message("g", "T", 0, 0, 32)
        assert got.message_count == 32
        assert all(body in bytes(b) for b in got.buffers)
    finally:
        await store.shutdown()
    assert store._prefault is None and svc._thread is None and svc.wake_offset == NO_WAKE


async def test_kernel_refusal_disables_it_and_puts_still_work(tmp_path, monkeypatch):
    # an advice value no kernel knows: madvise fails with EINVAL, as MADV_POPULATE_WRITE does before 5.14
    monkeypatch.setattr(message_store_module, "Madvise", lambda advice: Madvise(advice=0x7FFF))
    cfg = small_config(tmp_path, mapped_file_size_commit_log=1 * MiB, prefault_ahead_bytes=256 * 1024)
    store = MessageStore(cfg)
    assert await store.load()
    await store.start()
    try:
        svc = store._prefault
        assert svc is not None
        # the first append wakes the service (an idle store populates nothing), which then meets the refusal
        assert (await store.put_message(make_msg())).status == PutMessageStatus.PUT_OK
        for _ in range(100):
            if not svc.enabled:
                break
            await asyncio.sleep(0.02)
        assert not svc.enabled and svc.wake_offset == NO_WAKE
        for i in range(400):  # over a file roll: the next file is created without pre-faulting
            r = await store.put_message(make_msg(body=os.urandom(3000), keys=f"k{i}"))
            assert r.status == PutMessageStatus.PUT_OK
        assert len(store.commit_log.mapped_file_queue.mapped_files) >= 2
    finally:
        await store.shutdown()


async def test_an_idle_store_populates_nothing_until_the_first_append(tmp_path, needs_populate_write):
    # issue 15: an idle broker kept a populated window in the first file and in the next one created ahead
    ahead = 256 * 1024
    cfg = small_config(tmp_path, mapped_file_size_commit_log=1 * MiB, prefault_ahead_bytes=ahead)
    store = MessageStore(cfg)
    assert await store.load()
    await store.start()
    svc = store._prefault
    try:
        assert svc is not None and svc.enabled and svc.wake_offset == 0
        mfq = store.commit_log.mapped_file_queue
        for _ in range(50):  # the next file is being created ahead meanwhile
            if mfq._allocating and all(f.done() for f in mfq._allocating.values()):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # room for a refill that should not happen
        assert mfq.last_mapped_file().prefaulted_position == 0 and svc.populated_bytes == 0
        created = [f.result() for f in mfq._allocating.values() if f.done() and not f.exception()]
        assert all(mf.prefaulted_position == 0 for mf in created)
        assert (await store.put_message(make_msg())).status == PutMessageStatus.PUT_OK
        for _ in range(200):
            if mfq.last_mapped_file().prefaulted_position >= ahead:
                break
            await asyncio.sleep(0.02)
        assert svc.active and mfq.last_mapped_file().prefaulted_position >= ahead
    finally:
        await store.shutdown()


async def test_zero_turns_it_off_and_negative_is_refused(tmp_path):
    store = MessageStore(small_config(tmp_path, prefault_ahead_bytes=0))
    assert await store.load()
    await store.start()
    try:
        assert store._prefault is None and store.commit_log.prefault is None
        assert (await store.put_message(make_msg())).status == PutMessageStatus.PUT_OK
    finally:
        await store.shutdown()
    with pytest.raises(StoreConfigError, match="prefault_ahead_bytes"):
        MessageStore(small_config(tmp_path / "neg", prefault_ahead_bytes=-1))


async def test_not_started_with_a_transient_store_pool(tmp_path):
    cfg = small_config(tmp_path, transient_store_pool_enable=True, transient_store_pool_size=2)
    store = MessageStore(cfg)
    assert await store.load()
    await store.start()
    try:
        assert store._prefault is None  # the writes go into pool buffers, not through the mapping
    finally:
        await store.shutdown()


def test_service_arms_the_next_file_when_the_current_one_is_populated(tmp_path, needs_populate_write):
    from store.mapped_file_queue import MappedFileQueue

    mfq = MappedFileQueue(str(tmp_path / "cl"), 256 * 1024)
    mf = mfq.get_last_mapped_file(0)
    svc = PrefaultService(mfq, 1 * MiB)
    try:
        svc.refill()
        assert mf.prefaulted_position == mf.file_size
        assert svc.wake_offset == mf.tail_offset  # no wake-up loop on a fully populated file
    finally:
        mfq.destroy()


class _CountingMadvise(Madvise):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def apply(self, mf, start, end, stopped):
        self.calls += 1
        return super().apply(mf, start, end, stopped)


def test_a_full_file_waiting_for_its_successor_does_not_spin(tmp_path, needs_populate_write):
    """The writer filled the file (BLANK written) and the next one is not installed yet: arm for the
    next file's first append instead of waking again at once."""
    from store.mapped_file_queue import MappedFileQueue

    mfq = MappedFileQueue(str(tmp_path / "cl"), 4 * MiB)
    mf = mfq.get_last_mapped_file(0)
    populator = _CountingMadvise()
    svc = PrefaultService(mfq, 1 * MiB, populator=populator)
    try:
        svc.refill()
        mf.wrote_position = mf.file_size  # full, prefaulted only to 1 MiB
        svc.refill()
        assert svc.wake_offset == mf.tail_offset
        assert not svc._wake.is_set()
        assert populator.calls == 1
    finally:
        mfq.destroy()


async def test_the_window_keeps_up_with_a_writer_that_never_yields(tmp_path, needs_populate_write):
    """A caller putting in a tight loop lets the event loop run only every few dozen puts; the
    service runs on its own thread, so the window still moves ahead of the writer in the meantime."""
    cfg = small_config(tmp_path, mapped_file_size_commit_log=64 * MiB, prefault_ahead_bytes=4 * MiB)
    store = MessageStore(cfg)
    assert await store.load()
    await store.start()
    try:
        mf = store.commit_log.mapped_file_queue.last_mapped_file()
        body = b"x" * 4000
        behind = 0
        for i in range(2000):  # ~8 MiB, never awaiting anything that yields to the loop
            msg = make_msg(body=body, keys=f"k{i}")
            tail, crc, size = store.putter._plan(msg)
            req = AppendRequest(
                [msg], [tail], [crc], [size], size, msg.topic, msg.queue_id, msg.sys_flag, 0, msg.store_host, 0, None
            )
            if store.commit_log.append_now(req) is None:
                break
            if i % 200 == 199:
                # give the thread a moment (the loop itself is not run)
                deadline = time.monotonic() + 1.0
                while mf.prefaulted_position < mf.wrote_position + 2 * MiB and time.monotonic() < deadline:
                    time.sleep(0.001)  # noqa: ASYNC251 - on purpose: the event loop must not run here
                behind += mf.prefaulted_position < mf.wrote_position
        assert mf.wrote_position > 4 * MiB
        assert behind == 0
    finally:
        await store.shutdown()
