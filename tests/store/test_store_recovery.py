"""Recovery: clean restart from the checkpoint, abnormal recovery with CRC checks, corruption cases
(flipped bytes, truncated files, missing consume queues, stale checkpoints), index rebuild."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from store_helpers import make_msg

from store import GetMessageStatus, MessageStore, PutMessageStatus, decode_records


async def _fill(cfg, n=120, queues=2, body_size=300):
    s = MessageStore(cfg)
    assert await s.load()
    await s.start()
    offsets = []
    for i in range(n):
        body = (b"%06d" % i) * (body_size // 6)
        r = await s.put_message(make_msg(body=body, queue_id=i % queues, keys=f"key{i}", uniq=f"UNIQ{i}"))
        assert r.status == PutMessageStatus.PUT_OK
        offsets.append((r.append_result.wrote_offset, r.append_result.wrote_bytes))
    await s.shutdown()
    return offsets


async def _open(cfg) -> MessageStore:
    s = MessageStore(cfg)
    assert await s.load()
    await s.start()
    return s


def _all(s: MessageStore, queue_id: int, topic: str = "T") -> list:
    out, offset = [], 0
    while True:
        r = s.get_message("g", topic, queue_id, offset, 32)
        if r.status != GetMessageStatus.FOUND:
            return out
        out += decode_records(r.body)
        offset = r.next_begin_offset


def _crash_marker(cfg) -> None:
    """Make the next start abnormal, as if the process had been killed."""
    open(cfg.abort_file, "w").close()


async def test_clean_restart_uses_checkpoint_without_scan(config_factory):
    cfg = config_factory()
    await _fill(cfg)
    s = await _open(config_factory())
    try:
        assert s.last_recovery["startFile"] == "checkpoint"
        assert s.last_recovery["scannedBytes"] == 0
        assert len(_all(s, 0)) == 60 and len(_all(s, 1)) == 60
    finally:
        await s.shutdown()


async def test_abnormal_recovery_truncates_flipped_tail(config_factory):
    cfg = config_factory()
    offsets = await _fill(cfg)
    victim_offset, _ = offsets[100]
    files = sorted(os.listdir(cfg.store_path_commit_log))
    size = cfg.mapped_file_size_commit_log
    path = os.path.join(cfg.store_path_commit_log, files[victim_offset // size - int(files[0]) // size])
    with open(path, "r+b") as f:
        f.seek(victim_offset % size + 120)  # inside the body: only the CRC can tell
        b = f.read(1)
        f.seek(victim_offset % size + 120)
        f.write(bytes([b[0] ^ 0xFF]))
    _crash_marker(cfg)
    s = await _open(config_factory())
    try:
        assert s.last_recovery["normal"] is False
        assert s.get_max_phy_offset() == victim_offset
        assert s.last_recovery["droppedBytes"] > 0
        q0, q1 = _all(s, 0), _all(s, 1)
        assert len(q0) + len(q1) == 100
        assert all(m.body.startswith(b"%06d" % (m.queue_offset * 2 + m.queue_id)) for m in q0 + q1)
        # the next message takes the freed place and the queue offsets continue without a gap
        r = await s.put_message(make_msg(queue_id=0))
        assert r.append_result.wrote_offset == victim_offset
        assert r.append_result.logics_offset == 50
        # the index never returns the dropped message for its key
        assert s.query_message("T", "key100", 32, 0, 2**62).buffers == []
        assert len(s.query_message("T", "key99", 32, 0, 2**62).buffers) == 1
    finally:
        await s.shutdown()


async def test_truncated_last_file(config_factory):
    cfg = config_factory()
    offsets = await _fill(cfg, n=60)
    last_off, last_size = offsets[-1]
    size = cfg.mapped_file_size_commit_log
    for name in os.listdir(cfg.store_path_commit_log):
        if int(name) > last_off:
            os.unlink(os.path.join(cfg.store_path_commit_log, name))  # the file created ahead
    path = os.path.join(cfg.store_path_commit_log, f"{last_off - last_off % size:020d}")
    os.truncate(path, last_off % size + last_size // 2)  # cut the last record in half
    _crash_marker(cfg)
    s = await _open(config_factory())
    try:
        assert s.get_max_phy_offset() == last_off
        assert len(_all(s, 0)) + len(_all(s, 1)) == 59
        assert os.path.getsize(path) == cfg.mapped_file_size_commit_log
    finally:
        await s.shutdown()


async def test_missing_consume_queue_is_rebuilt(config_factory):
    cfg = config_factory()
    await _fill(cfg)
    shutil.rmtree(os.path.join(cfg.store_path_consume_queue, "T", "1"))
    s = await _open(config_factory())
    try:
        q1 = _all(s, 1)
        assert [m.queue_offset for m in q1] == list(range(60))
        assert len(_all(s, 0)) == 60
        assert (await s.put_message(make_msg(queue_id=1))).append_result.logics_offset == 60
    finally:
        await s.shutdown()


async def test_all_consume_queues_deleted_are_rebuilt(config_factory):
    cfg = config_factory()
    await _fill(cfg)
    shutil.rmtree(cfg.store_path_consume_queue)
    os.unlink(cfg.queue_manifest_file)
    s = await _open(config_factory())
    try:
        assert len(_all(s, 0)) == 60 and len(_all(s, 1)) == 60
    finally:
        await s.shutdown()


async def test_stale_checkpoint_from_earlier_state(config_factory):
    cfg = config_factory()
    await _fill(cfg, n=20)
    stale = Path(cfg.store_checkpoint).read_bytes()
    s = await _open(config_factory())
    for i in range(100):
        await s.put_message(make_msg(body=b"later%d" % i, queue_id=0))
    await s.shutdown()
    Path(cfg.store_checkpoint).write_bytes(stale)  # claims a clean end long before the real one
    s = await _open(config_factory())
    try:
        assert s.last_recovery["startFile"] != "checkpoint"  # the stale offset was rejected
        assert len(_all(s, 0)) == 110
    finally:
        await s.shutdown()
    # and after a crash with a garbage checkpoint the scan starts at the first file
    with open(cfg.store_checkpoint, "r+b") as f:
        f.write(b"\x7f" * 24)
    _crash_marker(cfg)
    s = await _open(config_factory())
    try:
        assert len(_all(s, 0)) == 110 and len(_all(s, 1)) == 10
    finally:
        await s.shutdown()


async def test_consume_queue_ahead_of_commit_log_is_truncated(config_factory):
    cfg = config_factory()
    offsets = await _fill(cfg, n=40)
    # lose the CommitLog tail (e.g. unflushed pages after an OS crash): cut back to message 30
    cut_off = offsets[30][0]
    files = sorted(os.listdir(cfg.store_path_commit_log))
    size = cfg.mapped_file_size_commit_log
    for name in files:
        start = int(name)
        path = os.path.join(cfg.store_path_commit_log, name)
        if start >= cut_off:
            os.unlink(path)
        elif start + size > cut_off:
            with open(path, "r+b") as f:
                f.seek(cut_off - start)
                f.write(bytes(start + size - cut_off))
    _crash_marker(cfg)
    s = await _open(config_factory())
    try:
        assert s.get_max_offset_in_queue("T", 0) == 15 and s.get_max_offset_in_queue("T", 1) == 15
        r = s.get_message("g", "T", 0, 15, 32)
        assert r.status == GetMessageStatus.OFFSET_OVERFLOW_ONE
    finally:
        await s.shutdown()


async def test_index_is_rebuilt_when_deleted(config_factory):
    cfg = config_factory()
    await _fill(cfg, n=30)
    shutil.rmtree(cfg.store_path_index)
    s = await _open(config_factory())
    try:
        got = decode_records(s.query_message("T", "UNIQ7", 32, 0, 2**62).body)
        assert [m.properties["KEYS"] for m in got] == ["key7"]
    finally:
        await s.shutdown()
