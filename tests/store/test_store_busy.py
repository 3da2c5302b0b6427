"""Busy signals as upstream: isOSPageCacheBusy / lockTimeMills / OS_PAGECACHE_BUSY, and the fault
injection switches that drive them."""

from __future__ import annotations

import asyncio

from store_helpers import make_msg

from store import PutMessageStatus


async def test_idle_store_is_not_busy(store_factory):
    s = await store_factory()
    assert not s.is_os_page_cache_busy()
    assert s.lock_time_mills() == 0
    await s.put_message(make_msg())
    assert not s.is_os_page_cache_busy() and s.lock_time_mills() == 0


async def test_stalled_append_makes_page_cache_busy(store_factory, config_factory):
    s = await store_factory(config_factory(os_page_cache_busy_timeout_mills=100))
    stalled = asyncio.create_task(s.put_message(make_msg(body=b"slow"), stall_append_ms=800))
    await asyncio.sleep(0.4)
    # the loop kept running while the lock is held: a sweeper sees the busy lock
    assert s.lock_time_mills() >= 200
    assert s.is_os_page_cache_busy()
    r = await s.put_message(make_msg(body=b"rejected"))
    assert r.status == PutMessageStatus.OS_PAGECACHE_BUSY and r.append_result is None
    assert s.runtime_info()["pageCacheLockTimeMills"] != "0"
    done = await stalled
    assert done.status == PutMessageStatus.PUT_OK
    assert not s.is_os_page_cache_busy() and s.lock_time_mills() == 0
    assert (await s.put_message(make_msg())).status == PutMessageStatus.PUT_OK
    bodies = [s.look_message_by_offset(s.get_commit_log_offset_in_queue("T", 0, i)).body for i in range(2)]
    assert bodies[0] == b"slow" and b"rejected" not in bodies


async def test_busy_uses_upstream_thresholds(store_factory, config_factory):
    now = [10_000_000_000]
    s = await store_factory(config_factory(os_page_cache_busy_timeout_mills=1000), now_ms=lambda: now[0])
    s.commit_log.begin_time_in_lock = now[0] - 1000
    assert not s.is_os_page_cache_busy()  # diff must exceed the timeout
    assert not s.is_busy_or_deficient()
    s.commit_log.begin_time_in_lock = now[0] - 1001
    assert s.is_os_page_cache_busy()
    assert s.is_busy_or_deficient()  # (the send processor's one question per request)
    assert s.lock_time_mills() == 1001
    s.commit_log.begin_time_in_lock = now[0] - 10_000_001
    assert not s.is_os_page_cache_busy()  # a clock jump is not "busy"
    assert not s.is_busy_or_deficient()
    s.commit_log.begin_time_in_lock = 0
    assert not s.is_busy_or_deficient()


async def test_fault_stall_window_holds_every_append(store_factory, config_factory):
    s = await store_factory(config_factory(os_page_cache_busy_timeout_mills=50))
    s.fault.inject_stall_append(400)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    first = asyncio.create_task(s.put_message(make_msg()))
    await asyncio.sleep(0.2)
    assert s.is_os_page_cache_busy()
    assert (await first).status == PutMessageStatus.PUT_OK
    assert loop.time() - t0 >= 0.35
    # the window is over: back to normal
    t1 = loop.time()
    assert (await s.put_message(make_msg())).status == PutMessageStatus.PUT_OK
    assert loop.time() - t1 < 0.3
    assert s.fault.snapshot()["stallAppendUntilMs"] == 0


async def test_runtime_info_has_upstream_keys(store_factory):
    s = await store_factory()
    await s.put_message(make_msg())
    info = s.runtime_info()
    for key in (
        "commitLogDiskRatio",
        "consumeQueueDiskRatio",
        "putMessageTimesTotal",
        "putMessageSizeTotal",
        "putMessageAverageSize",
        "putMessageEntireTimeMax",
        "putTps",
        "getFoundTps",
        "remainTransientStoreBufferNumbs",
        "pageCacheLockTimeMills",
        "commitLogMaxOffset",
        "commitLogMinOffset",
        "bootTimestamp",
        "runtime",
        "dispatchBehindBytes",
    ):
        assert key in info, key
        assert isinstance(info[key], str)
    assert info["commitLogMaxOffset"] == str(s.get_max_phy_offset())
    assert info["commitLogMinOffset"] == "0"
    assert info["remainTransientStoreBufferNumbs"] == str(2**31 - 1)
    assert 0 < float(info["commitLogDiskRatio"]) <= 1
