"""Crash recovery rebuilds consume queues and the index from the records the scan verified while the
scan goes on (store/predispatch.py): the same result as the dispatch after the scan, never anything the
scan drops, and nothing at all when the run is not contiguous with where the dispatch starts."""

from __future__ import annotations

import asyncio
import os
import shutil
import struct

from store_helpers import make_msg

from store import GetMessageStatus, MessageStore, PutMessageStatus, decode_records

FILE = 32 * 1024  # a few CommitLog files, BLANK ends between them


async def _fill(cfg, n=300, queues=3):
    s = MessageStore(cfg)
    assert await s.load()
    await s.start()
    offsets = []
    for i in range(0, n, 10):
        batch = [
            make_msg(body=b"%06d" % (i + j) * 40, queue_id=(i // 10) % queues, keys=f"key{i + j}", uniq=f"U{i + j}")
            for j in range(10)
        ]
        r = await s.put_messages(batch)
        assert r.status == PutMessageStatus.PUT_OK
        offsets += [(phy, batch[j]) for j, phy in enumerate(_phys(r))]
    await s.shutdown()
    return offsets


def _phys(r) -> list[int]:
    out, pos = [], r.append_result.wrote_offset
    for msg_id in r.append_result.msg_ids:
        out.append(int(msg_id[16:], 16))
    assert out[0] == pos
    return out


def _crash_with_checkpoint(cfg, ts: int) -> None:
    """The abort file of a crash and a checkpoint whose timestamps are all `ts`."""
    open(cfg.abort_file, "w").close()
    with open(cfg.store_checkpoint, "r+b") as f:
        f.write(struct.pack(">qqq", ts, ts, ts))


def _flip_byte(path: str, pos: int) -> None:
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0xFF]))


def _force_full_crash_scan(cfg, *, drop_queues: bool = True, drop_index: bool = True) -> None:
    _crash_with_checkpoint(cfg, 1)  # older than every record: the scan starts at the first file
    if drop_queues:
        shutil.rmtree(cfg.store_path_consume_queue)
        os.unlink(cfg.queue_manifest_file)
    if drop_index:
        shutil.rmtree(cfg.store_path_index)


def _first_store_ts(path: str) -> int:
    with open(path, "rb") as f:
        head = f.read(64)
    return struct.unpack_from(">q", head, 56)[0]


def _queue(s: MessageStore, queue_id: int) -> list:
    out, offset = [], 0
    while True:
        r = s.get_message("g", "T", queue_id, offset, 32)
        if r.status != GetMessageStatus.FOUND:
            return out
        out += decode_records(r.body)
        offset = r.next_begin_offset


async def _open(cfg) -> MessageStore:
    s = MessageStore(cfg)
    assert await s.load()
    await s.start()
    return s


async def test_queues_and_index_are_rebuilt_while_the_scan_runs(config_factory):
    cfg = config_factory(mapped_file_size_commit_log=FILE)
    written = await _fill(cfg)
    _force_full_crash_scan(cfg)
    s = await _open(config_factory(mapped_file_size_commit_log=FILE))
    try:
        assert s.last_recovery["records"] == 300
        assert s.last_recovery["preDispatched"] == 300
        for q in range(3):
            got = _queue(s, q)
            assert [m.queue_offset for m in got] == list(range(100))
            assert [m.properties["UNIQ_KEY"] for m in got] == [
                f"U{i + j}" for i in range(0, 300, 10) if (i // 10) % 3 == q for j in range(10)
            ]
        for key in ("key0", "key155", "U299"):
            assert s.query_message("T", key, 32, 0, 2**62).message_count == 1
        r = await s.put_message(make_msg(queue_id=1))
        assert r.append_result.logics_offset == 100
    finally:
        await s.shutdown()
    assert len(written) == 300


async def test_nothing_the_scan_drops_is_dispatched(config_factory):
    cfg = config_factory(mapped_file_size_commit_log=FILE)
    written = await _fill(cfg)
    victim, _ = written[250]
    size = cfg.mapped_file_size_commit_log
    path = os.path.join(cfg.store_path_commit_log, f"{victim - victim % size:020d}")
    _flip_byte(path, victim % size + 100)  # in the body: only the CRC can tell
    _force_full_crash_scan(cfg)
    s = await _open(config_factory(mapped_file_size_commit_log=FILE))
    try:
        assert s.get_max_phy_offset() == victim
        assert s.last_recovery["preDispatched"] == 250
        assert sum(len(_queue(s, q)) for q in range(3)) == 250
        assert s.query_message("T", "key250", 32, 0, 2**62).message_count == 0
        assert s.query_message("T", "key249", 32, 0, 2**62).message_count == 1
    finally:
        await s.shutdown()


async def test_consume_queues_that_are_complete_get_nothing(config_factory):
    cfg = config_factory(mapped_file_size_commit_log=FILE)
    await _fill(cfg)
    _force_full_crash_scan(cfg, drop_queues=False, drop_index=False)
    s = await _open(config_factory(mapped_file_size_commit_log=FILE))
    try:
        assert s.last_recovery["records"] == 300
        assert s.last_recovery["preDispatched"] == 0
        assert [len(_queue(s, q)) for q in range(3)] == [100, 100, 100]
    finally:
        await s.shutdown()


async def test_a_scan_that_starts_after_the_dispatch_start_leaves_it_to_the_reput(config_factory):
    """Queues deleted, but a recent checkpoint: the scan verifies only the newest file(s) while the
    dispatch must start at the first record; the reput after recovery rebuilds everything."""
    cfg = config_factory(mapped_file_size_commit_log=FILE)
    await _fill(cfg)
    # a crash, with a checkpoint taken after the newest file began: the scan starts at that file
    size = cfg.mapped_file_size_commit_log
    names = sorted(os.listdir(cfg.store_path_commit_log))
    newest = next(
        n
        for n in reversed(names)
        if os.path.getsize(os.path.join(cfg.store_path_commit_log, n))
        and _first_store_ts(os.path.join(cfg.store_path_commit_log, n)) > 0
    )
    ts = _first_store_ts(os.path.join(cfg.store_path_commit_log, newest))
    _crash_with_checkpoint(cfg, ts + 3000)
    assert int(newest) >= size
    shutil.rmtree(cfg.store_path_consume_queue)
    os.unlink(cfg.queue_manifest_file)
    s = await _open(config_factory(mapped_file_size_commit_log=FILE))
    try:
        assert s.last_recovery["records"] < 300  # only the newest file(s) were scanned
        assert s.last_recovery["preDispatched"] == 0
        assert [len(_queue(s, q)) for q in range(3)] == [100, 100, 100]
    finally:
        await s.shutdown()


async def test_one_io_thread_recovers_without_pre_dispatch(config_factory):
    """With a single worker thread the parses would queue behind the scan that waits for them: the
    pre-dispatch stays off and the reput rebuilds after the scan."""
    cfg = config_factory(mapped_file_size_commit_log=FILE)
    await _fill(cfg)
    _force_full_crash_scan(cfg)
    s = MessageStore(config_factory(mapped_file_size_commit_log=FILE), io_threads=1)
    assert await asyncio.wait_for(s.load(), 30)
    await s.start()
    try:
        assert s.last_recovery["preDispatched"] == 0
        assert [len(_queue(s, q)) for q in range(3)] == [100, 100, 100]
    finally:
        await s.shutdown()
