"""Flush: ASYNC_FLUSH in the background, SYNC_FLUSH group commit, FLUSH_DISK_TIMEOUT, and the event
loop never blocking on fsync (it runs in worker threads)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from store_helpers import make_msg

from store import MessageStore, PutMessageStatus


async def _ticker(counter: list[int], stop: asyncio.Event) -> None:
    while not stop.is_set():
        counter[0] += 1
        await asyncio.sleep(0.005)


async def test_async_flush_catches_up_in_background(store_factory, config_factory):
    s = await store_factory(config_factory(flush_interval_commit_log=20, flush_commit_log_least_pages=0))
    for _ in range(50):
        await s.put_message(make_msg(body=b"z" * 500))
    target = s.get_max_phy_offset()
    for _ in range(200):
        if s.commit_log.mapped_file_queue.flushed_where >= target:
            break
        await asyncio.sleep(0.01)
    assert s.commit_log.mapped_file_queue.flushed_where >= target
    assert s.checkpoint.physic_msg_timestamp > 0


async def test_async_flush_respects_least_pages(store_factory, config_factory):
    s = await store_factory(
        config_factory(
            flush_interval_commit_log=10,
            flush_commit_log_least_pages=4,
            flush_commit_log_thorough_interval=10**9,
        )
    )
    flusher = s._flusher
    rounds = [0]
    flush = flusher.flush

    async def counting(least_pages: int) -> bool:
        rounds[0] += 1
        return await flush(least_pages)

    flusher.flush = counting

    async def rounds_reach(n: int) -> None:
        for _ in range(500):  # counted rounds, not a sleep: a loaded machine may run late
            if rounds[0] >= n:
                return
            await asyncio.sleep(0.01)

    await rounds_reach(1)  # the first (thorough) round passes with nothing to flush
    await s.put_message(make_msg(body=b"z" * 1000))  # far less than 4 pages
    await rounds_reach(rounds[0] + 3)
    assert s.commit_log.mapped_file_queue.flushed_where == 0


async def test_sync_flush_acks_after_fsync_and_groups_commits(store_factory, config_factory):
    s = await store_factory(config_factory(flush_disk_type="SYNC_FLUSH"))
    r = await s.put_message(make_msg())
    assert r.status == PutMessageStatus.PUT_OK
    assert s.commit_log.mapped_file_queue.flushed_where >= r.append_result.wrote_offset + r.append_result.wrote_bytes
    before = s._flusher.flush_count
    results = await asyncio.gather(*(s.put_message(make_msg(queue_id=i % 4)) for i in range(200)))
    assert all(x.status == PutMessageStatus.PUT_OK for x in results)
    fsyncs = s._flusher.flush_count - before
    assert 0 < fsyncs < 100, fsyncs  # one fsync covers many puts


async def test_sync_flush_timeout_and_loop_keeps_running(store_factory, config_factory):
    s = await store_factory(config_factory(flush_disk_type="SYNC_FLUSH", sync_flush_timeout=200))
    s.fault.inject_slow_fsync(600)
    counter, stop = [0], asyncio.Event()
    ticker = asyncio.create_task(_ticker(counter, stop))
    r = await s.put_message(make_msg())
    stop.set()
    await ticker
    assert r.status == PutMessageStatus.FLUSH_DISK_TIMEOUT
    assert r.append_result is not None  # stored, not yet durable: the broker answers FLUSH_DISK_TIMEOUT (10)
    assert counter[0] >= 10, "the event loop was blocked during the slow fsync"
    # a message that does not wait (WAIT=false) is answered at once
    r = await asyncio.wait_for(s.put_message(make_msg(props={"WAIT": "false"})), 0.5)
    assert r.status == PutMessageStatus.PUT_OK
    s.fault.clear()


async def test_shutdown_flushes_everything(config_factory):
    cfg = config_factory(flush_interval_commit_log=10_000, flush_commit_log_timed=True)
    s = MessageStore(cfg)
    assert await s.load()
    await s.start()
    for _ in range(20):
        await s.put_message(make_msg())
    end = s.get_max_phy_offset()
    mfq = s.commit_log.mapped_file_queue
    await s.shutdown()
    assert mfq.flushed_where == end


async def test_consume_queues_index_and_checkpoint_are_flushed(store_factory, config_factory):
    s = await store_factory(config_factory(flush_interval_consume_queue=20, flush_consume_queue_thorough_interval=0))
    for i in range(30):
        await s.put_message(make_msg(queue_id=i % 3, keys=f"k{i}"))
    cqs = [s.find_consume_queue("T", q).mapped_file_queue for q in range(3)]
    for _ in range(200):
        if all(m.flushed_where == m.max_offset() for m in cqs) and s.checkpoint.index_msg_timestamp:
            break
        await asyncio.sleep(0.01)
    assert all(m.flushed_where == m.max_offset() == 10 * 20 for m in cqs)
    assert s.checkpoint.logics_msg_timestamp > 0 and s.checkpoint.index_msg_timestamp > 0
    import struct

    raw = Path(s.config.store_checkpoint).read_bytes()[:24]
    _physic, logics, _index = struct.unpack(">qqq", raw)
    assert logics > 0  # written to the checkpoint file itself


async def _index_fsyncs(monkeypatch, s: MessageStore, keys: int) -> list[str]:
    """Put `keys` keyed messages, let ten consume-queue flush rounds pass; the index files fdatasync'ed meanwhile."""
    from store.index_service import IndexFile

    synced: list[str] = []
    real = IndexFile.flush_blocking

    def spy(self: IndexFile) -> None:
        synced.append(self.file_name)
        real(self)

    monkeypatch.setattr(IndexFile, "flush_blocking", spy)
    for i in range(keys):
        await s.put_message(make_msg(queue_id=i % 3, keys=f"k{i}"))
    cqs = [s.find_consume_queue("T", q).mapped_file_queue for q in range(3)]
    for _ in range(300):
        if all(m.flushed_where == m.max_offset() for m in cqs):
            break
        await asyncio.sleep(0.01)
    assert all(m.flushed_where == m.max_offset() for m in cqs), "the consume queues are flushed every round"
    await asyncio.sleep(0.2)  # ten more rounds of 20 ms
    return synced


async def test_index_is_fsynced_on_thorough_rounds_only(store_factory, config_factory, monkeypatch):
    """Between thorough rounds the current index file is left to the page cache (upstream flushes it when full and at
    shutdown): a round's fdatasync would write back most of the hashed slot table and fault it in again."""
    s = await store_factory(
        config_factory(
            flush_interval_consume_queue=20,
            flush_consume_queue_least_pages=1,
            flush_consume_queue_thorough_interval=10**9,
        )
    )
    synced = await _index_fsyncs(monkeypatch, s, 30)
    # (the first round is thorough: it runs before any key)
    before = len(synced)
    await asyncio.sleep(0.2)
    assert len(synced) == before
    stamp = s.checkpoint.index_msg_timestamp
    await s.shutdown()
    assert len(synced) > before, "shutdown flushes the index"
    assert s.index_service.index_files[-1].end_timestamp >= stamp


async def test_index_safe_fsyncs_the_index_every_round(store_factory, config_factory, monkeypatch):
    """messageIndexSafe: recovery starts from the index's checkpoint time, so every round keeps it recent."""
    s = await store_factory(
        config_factory(
            flush_interval_consume_queue=20,
            flush_consume_queue_least_pages=1,
            flush_consume_queue_thorough_interval=10**9,
            message_index_safe=True,
        )
    )
    synced = await _index_fsyncs(monkeypatch, s, 30)
    assert len(synced) >= 5
    assert s.checkpoint.index_msg_timestamp > 0
