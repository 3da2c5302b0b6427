"""Transient store pool: writes land in locked anonymous buffers, are committed into the files by the
commit service, readers never see uncommitted bytes, buffers return when their file is full."""

from __future__ import annotations

import asyncio
import os

from store_helpers import make_msg
from structlog.testing import capture_logs

from store import GetMessageStatus, PutMessageStatus
from store import transient_store_pool as tsp
from store.transient_store_pool import TransientStorePool


def _pool_config(config_factory, **kw):
    values = {
        "transient_store_pool_enable": True,
        "transient_store_pool_size": 2,
        "commit_interval_commit_log": 20,
        "commit_commit_log_least_pages": 10_000,  # only explicit commits in these tests
        "commit_commit_log_thorough_interval": 10**9,
    }
    values.update(kw)
    return config_factory(**values)


async def test_uncommitted_bytes_are_invisible(store_factory, config_factory):
    s = await store_factory(_pool_config(config_factory))
    await s._commit_service.stop()  # only explicit commits below
    r = await s.put_message(make_msg(body=b"secret"))
    assert r.status == PutMessageStatus.PUT_OK
    off = r.append_result.wrote_offset
    assert s.select_one_message_by_offset(off) is None
    assert s.get_message("g", "T", 0, 0, 32).status == GetMessageStatus.NO_MATCHED_LOGIC_QUEUE
    mf = s.commit_log.mapped_file_queue.last_mapped_file()
    assert mf.write_buffer is not None
    assert bytes(mf.view[off : off + 8]) == bytes(8)  # not in the file yet
    await s._commit_service.commit(0)
    await asyncio.sleep(0.01)
    assert s.look_message_by_offset(off).body == b"secret"
    g = s.get_message("g", "T", 0, 0, 32)
    assert g.status == GetMessageStatus.FOUND and g.message_count == 1


async def test_commit_service_commits_in_background(store_factory, config_factory):
    s = await store_factory(_pool_config(config_factory, commit_commit_log_least_pages=0))
    r = await s.put_message(make_msg(body=b"bg"))
    for _ in range(100):
        if s.get_message("g", "T", 0, 0, 32).status == GetMessageStatus.FOUND:
            break
        await asyncio.sleep(0.01)
    assert s.look_message_by_offset(r.append_result.wrote_offset).body == b"bg"


async def test_pool_deficiency_and_buffer_return(store_factory, config_factory):
    s = await store_factory(_pool_config(config_factory))
    assert s.remain_transient_store_buffer_numbs() == 1  # the first file, created at start, holds one
    # a full file is committed as soon as the commit service runs: pause it to see the pool run dry
    await s._commit_service.stop()
    body = b"p" * 4000
    for _ in range(20):  # ~80 KB: the first 64 KiB file fills up, a second file borrows the 2nd buffer
        await s.put_message(make_msg(body=body))
    assert len(s.commit_log.mapped_file_queue.mapped_files) >= 2
    assert s.is_transient_store_pool_deficient()
    assert s.runtime_info()["remainTransientStoreBufferNumbs"] == "0"
    await s._commit_service.commit(0)
    # the full file is committed: its buffer went back
    assert not s.is_transient_store_pool_deficient()
    assert s.remain_transient_store_buffer_numbs() == 1
    assert s.commit_log.mapped_file_queue.mapped_files[0].write_buffer is None
    for _ in range(100):  # the reput runs behind the commit
        if s.get_max_offset_in_queue("T", 0) == 20:
            break
        await asyncio.sleep(0.01)
    # everything committed is readable and intact
    msgs = []
    off = 0
    while True:
        g = s.get_message("g", "T", 0, off, 32)
        if g.status != GetMessageStatus.FOUND:
            break
        from store import decode_records

        msgs += decode_records(g.body)
        off = g.next_begin_offset
    assert len(msgs) == 20 and all(m.body == body for m in msgs)


async def test_drain_fault_makes_pool_deficient(store_factory, config_factory):
    s = await store_factory(_pool_config(config_factory))
    assert not s.is_transient_store_pool_deficient()
    assert not s.is_busy_or_deficient()
    s.fault.inject_drain_pool(10_000)
    assert s.is_transient_store_pool_deficient()
    assert s.is_busy_or_deficient()  # (the send processor's one question per request, no append section open)
    s.fault.clear()
    assert not s.is_transient_store_pool_deficient()
    assert not s.is_busy_or_deficient()


async def test_pool_disabled_is_never_deficient(store_factory):
    s = await store_factory()
    assert not s.is_transient_store_pool_deficient()
    s.fault.inject_drain_pool(10_000)  # (drains a pool: without one, nothing to drain)
    assert not s.is_transient_store_pool_deficient() and not s.is_busy_or_deficient()


def test_mlock_refusal_logs_once_and_keeps_unlocked_buffers(monkeypatch):
    class FakeLibc:
        def __init__(self, *a, **k):
            self.mlock = lambda addr, size: -1
            self.munlock = lambda addr, size: 0

    monkeypatch.setattr(tsp.ctypes, "CDLL", FakeLibc)
    pool = TransientStorePool(3, 64 * 1024)
    with capture_logs() as logs:
        pool.init()
    refusals = [e for e in logs if "mlock refused" in e["event"]]
    assert len(refusals) == 1
    assert not pool.locked and pool.available_buffer_nums() == 3
    assert pool.borrow_buffer() is not None
    pool.destroy()


def test_mlock_locks_buffers_when_allowed():
    pool = TransientStorePool(1, 64 * 1024)
    pool.init()
    try:
        # root, or a memlock limit above 64 KiB: locking works; otherwise the refusal path above
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
        import os

        if os.geteuid() == 0 or soft == resource.RLIM_INFINITY or soft >= 64 * 1024:
            assert pool.locked
    finally:
        pool.destroy()


async def test_a_batch_in_a_pool_buffer_is_dispatched_once_committed(store_factory, config_factory):
    """One descriptor for the whole batch: nothing of it is readable or queued before the commit, all
    of it (consume queue entries, index keys) after; across a consume queue file boundary (100 entries
    a file here) the descriptor is dispatched record by record."""
    from store.commit_log import DispatchBatch

    s = await store_factory(_pool_config(config_factory, mapped_file_size_commit_log=256 * 1024))
    await s._commit_service.stop()  # only explicit commits below
    first = await s.put_messages([make_msg(body=b"a" * 30, uniq=f"A{i}") for i in range(90)])
    second = await s.put_messages([make_msg(body=b"b" * 30, uniq=f"B{i}") for i in range(20)])
    assert first.status == second.status == PutMessageStatus.PUT_OK
    assert [type(d) for d in s.commit_log.dispatch_queue] == [DispatchBatch, DispatchBatch]
    assert s.get_max_offset_in_queue("T", 0) == 0
    assert s.query_message("T", "A0", 32, 0, 2**62).message_count == 0
    await s._commit_service.commit(0)
    for _ in range(100):
        if s.get_max_offset_in_queue("T", 0) == 110:
            break
        await asyncio.sleep(0.01)
    assert s.get_max_offset_in_queue("T", 0) == 110
    assert not s.commit_log.dispatch_queue
    seen = []
    offset = 0
    while offset < 110:
        g = s.get_message("g", "T", 0, offset, 64)
        assert g.status == GetMessageStatus.FOUND
        seen += [bytes(b) for b in g.buffers]
        offset = g.next_begin_offset
    assert len(seen) == 110
    assert sum(b"a" * 30 in b for b in seen) == 90 and sum(b"b" * 30 in b for b in seen) == 20
    for key in ("A0", "A89", "B0", "B19"):
        assert s.query_message("T", key, 32, 0, 2**62).message_count == 1


async def test_shutdown_waits_for_the_dispatch_the_last_commit_started(store_factory, config_factory):
    """The commit service's last commit wakes the reput; shutdown must wait for that catch-up (it yields
    every few thousand records) before it closes the files, and stop cleanly."""
    cfg = _pool_config(config_factory, mapped_file_size_commit_log=4 * 1024 * 1024)
    s = await store_factory(cfg)
    await s._commit_service.stop()  # only explicit commits: everything below waits for the shutdown
    s._commit_service._stopped = False
    for i in range(12):
        r = await s.put_messages([make_msg(body=b"x" * 40, uniq=f"S{i}-{j}") for j in range(500)])
        assert r.status == PutMessageStatus.PUT_OK
    await s._commit_service.commit(0)  # wakes the reput, which is now catching up in the background
    await asyncio.sleep(0)
    await s.shutdown()
    assert not os.path.exists(cfg.abort_file)  # a clean stop: everything dispatched
    s2 = await store_factory(cfg)
    assert s2.get_max_offset_in_queue("T", 0) == 6000
    assert s2.query_message("T", "S11-499", 32, 0, 2**62).message_count == 1
