"""Retention: deleteWhen / fileReservedTime / diskMaxUsedSpaceRatio; consume queues and min offsets
follow, consumers behind get OFFSET_TOO_SMALL; a full disk refuses puts."""

from __future__ import annotations

import asyncio
import os
import time

from store_helpers import make_msg

from store import GetMessageStatus, PutMessageStatus
from store.clean import CleanService


async def _fill(s, n=80, body=b"r" * 2000):
    for i in range(n):
        assert (await s.put_message(make_msg(body=body, keys=f"k{i}"))).status == PutMessageStatus.PUT_OK


def _age_files(directory: str, hours: float) -> None:
    t = time.time() - hours * 3600
    for name in os.listdir(directory):
        os.utime(os.path.join(directory, name), (t, t))


def _hour_now() -> str:
    return f"{time.localtime().tm_hour:02d}"


def _other_hour() -> str:
    return f"{(time.localtime().tm_hour + 12) % 24:02d}"


async def test_expired_files_go_at_delete_when_and_queues_follow(store_factory, config_factory):
    s = await store_factory(config_factory(delete_when=_hour_now(), file_reserved_time=1))
    await _fill(s)
    files = s.commit_log.mapped_file_queue.mapped_files
    assert len(files) >= 3
    _age_files(s.config.store_path_commit_log, 2)
    clean = CleanService(s, disk_ratio=lambda p: 0.1)
    names = [f.file_name for f in files]
    deleted = clean.run_once()
    assert deleted == len(files) - 1  # never the last file
    for _ in range(100):  # unlinked in a worker thread, not on the loop
        if not any(os.path.exists(n) for n in names[:-1]):
            break
        await asyncio.sleep(0.01)
    assert not any(os.path.exists(n) for n in names[:-1]) and os.path.exists(names[-1])
    min_phy = s.get_min_phy_offset()
    assert min_phy == s.commit_log.mapped_file_queue.mapped_files[0].file_from_offset > 0
    min_q = s.get_min_offset_in_queue("T", 0)
    assert min_q > 0
    assert s.get_commit_log_offset_in_queue("T", 0, min_q) >= min_phy
    r = s.get_message("g", "T", 0, 0, 32)
    assert (r.status, r.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, min_q)
    r = s.get_message("g", "T", 0, min_q, 32)
    assert r.status == GetMessageStatus.FOUND
    # consume queue files whose entries all point at deleted CommitLog files are gone too
    cq = s.find_consume_queue("T", 0)
    assert cq.mapped_file_queue.mapped_files[0].file_from_offset // 20 <= min_q
    # and an index query never returns a deleted message
    assert s.query_message("T", "k0", 32, 0, 2**62).buffers == []


async def test_nothing_goes_outside_delete_when_with_free_disk(store_factory, config_factory):
    s = await store_factory(config_factory(delete_when=_other_hour(), file_reserved_time=1))
    await _fill(s)
    _age_files(s.config.store_path_commit_log, 2)
    assert CleanService(s, disk_ratio=lambda p: 0.1).run_once() == 0
    assert s.get_min_phy_offset() == 0


async def test_disk_above_ratio_deletes_at_any_hour(store_factory, config_factory):
    s = await store_factory(
        config_factory(delete_when=_other_hour(), file_reserved_time=1, disk_max_used_space_ratio=75)
    )
    await _fill(s)
    _age_files(s.config.store_path_commit_log, 2)
    assert CleanService(s, disk_ratio=lambda p: 0.80).run_once() > 0


async def test_forcible_level_deletes_unexpired_files(store_factory, config_factory):
    s = await store_factory(config_factory(delete_when=_other_hour(), file_reserved_time=72))
    await _fill(s)
    assert CleanService(s, disk_ratio=lambda p: 0.86).run_once() > 0  # above 85 %: clean at once


async def test_full_disk_refuses_puts_until_space_returns(store_factory, config_factory):
    s = await store_factory(config_factory(delete_when=_other_hour()))
    await _fill(s, n=3)
    ratio = [0.95]
    clean = CleanService(s, disk_ratio=lambda p: ratio[0])
    clean.run_once()
    r = await s.put_message(make_msg())
    assert r.status == PutMessageStatus.SERVICE_NOT_AVAILABLE
    ratio[0] = 0.3
    clean.run_once()
    assert (await s.put_message(make_msg())).status == PutMessageStatus.PUT_OK


async def test_manual_delete(store_factory, config_factory):
    s = await store_factory(config_factory(delete_when=_other_hour(), file_reserved_time=1))
    await _fill(s)
    _age_files(s.config.store_path_commit_log, 2)
    clean = CleanService(s, disk_ratio=lambda p: 0.1)
    clean.execute_delete_files_manually()
    assert clean.run_once() > 0


async def test_removed_commit_log_skips_to_the_next_file(store_factory):
    s = await store_factory()
    await _fill(s, n=60)
    mfq = s.commit_log.mapped_file_queue
    victim = mfq.mapped_files[0]
    mfq._delete_head([victim])  # the CommitLog file went, its queue entries are still there
    first_alive = next(i for i in range(60) if s.get_commit_log_offset_in_queue("T", 0, i) >= victim.tail_offset)
    r = s.get_message("g", "T", 0, 0, 10)
    assert r.status == GetMessageStatus.FOUND
    assert r.msg_queue_offsets[0] == first_alive and r.message_count == 10
    assert r.next_begin_offset == first_alive + 10


async def test_all_entries_removed_reports_message_was_removing(store_factory):
    s = await store_factory()
    for _ in range(20):
        await s.put_message(make_msg(body=b"a" * 100))
    for _ in range(40):
        await s.put_message(make_msg(topic="Other", body=b"b" * 2000))
    mfq = s.commit_log.mapped_file_queue
    mfq._delete_head([mfq.mapped_files[0]])  # every message of T lived there
    r = s.get_message("g", "T", 0, 0, 10)
    assert (r.status, r.next_begin_offset, r.message_count) == (GetMessageStatus.MESSAGE_WAS_REMOVING, 20, 0)
