"""The batch append paths: `RecordEncoder.plan_many`/`write_many` give exactly the bytes of `plan`/`write`,
records for pages the mapping has not populated go in with one pwrite (and a failed pwrite publishes
nothing), and a batch is dispatched to its consume queue and the index in list passes, falling back to
the record-by-record path at a consume queue file boundary."""

from __future__ import annotations

import contextlib
import errno
import os

import pytest
from store_helpers import make_msg, small_config

from store import MessageStore, PutMessageStatus
from store.consume_queue import CQ_STORE_UNIT_SIZE
from store.mapped_file import MappedFile
from store.message import (
    MAX_PROPERTIES_LENGTH,
    RecordEncoder,
    RecordError,
    decode_record,
    decode_records,
    tags_hash,
)


def _mixed_batch(n: int = 7):
    """Messages with different bodies, properties, flags, hosts and retry counts."""
    msgs = []
    for i in range(n):
        m = make_msg(
            "MixedTopic",
            os.urandom(50 + 37 * i),
            tags=f"tag{i % 3}",
            keys=f"k{i}" if i % 2 else None,
            uniq=f"U{i:04d}",
            flag=i,
            reconsume_times=i % 4,
        )
        m.born_host = (f"10.0.{i}.1", 40000 + i)
        msgs.append(m)
    return msgs


@pytest.mark.parametrize("queue_step", [1, 0])
def test_write_many_writes_the_bytes_write_writes(queue_step):
    enc = RecordEncoder()
    msgs = _mixed_batch()
    planned = [enc.plan(m) for m in msgs]
    tails = [p[0] for p in planned]
    crcs = [p[1] for p in planned]
    sizes = [p[2] for p in planned]
    total = sum(sizes)
    one_by_one = bytearray(total + 10)
    pos = 5
    for i, m in enumerate(msgs):
        enc.write(one_by_one, pos, m, tails[i], crcs[i], sizes[i], 100 + i * queue_step, 7000 + pos - 5, 1234)
        pos += sizes[i]
    many = bytearray(total + 10)
    phys = enc.write_many(many, 5, msgs, tails, crcs, sizes, 100, queue_step, 7000, 1234)
    assert many == one_by_one
    assert phys == [7000 + sum(sizes[:i]) for i in range(len(msgs))]
    decoded = decode_records(bytes(many[5 : 5 + total]))
    assert [d.queue_offset for d in decoded] == [100 + i * queue_step for i in range(len(msgs))]
    assert [d.body for d in decoded] == [m.body for m in msgs]
    assert [d.born_host for d in decoded] == [m.born_host for m in msgs]


def test_plan_many_matches_plan_and_checks_the_batch_size():
    enc = RecordEncoder()
    msgs = _mixed_batch()
    tails, crcs, sizes, total = enc.plan_many(msgs, 4 * 1024 * 1024)
    assert list(zip(tails, crcs, sizes)) == [enc.plan(m) for m in msgs]
    assert total == sum(sizes)
    wire = sum(22 + len(m.body) + len(m.properties_string.encode()) for m in msgs)
    with pytest.raises(RecordError, match=f"batch of {wire} bytes exceeds maxMessageSize {wire - 1}"):
        enc.plan_many(msgs, wire - 1)
    big = make_msg("MixedTopic", b"x", props={"P": "v" * (MAX_PROPERTIES_LENGTH + 1)})
    with pytest.raises(RecordError, match="PROPERTIES_SIZE_EXCEEDED"):
        enc.plan_many([msgs[0], big], 4 * 1024 * 1024)


@contextlib.asynccontextmanager
async def _store(tmp_path, **overrides):
    store = MessageStore(small_config(tmp_path, **overrides))
    assert await store.load()
    await store.start()
    try:
        yield store
    finally:
        await store.shutdown()


def _count_pwrites(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = MappedFile.write_at

    def counting(self, data, pos):
        calls.append(len(data))
        return real(self, data, pos)

    monkeypatch.setattr(MappedFile, "write_at", counting)
    return calls


async def test_unpopulated_pages_are_written_with_one_pwrite_per_put(tmp_path, monkeypatch):
    calls = _count_pwrites(monkeypatch)
    async with _store(tmp_path, mapped_file_size_commit_log=1024 * 1024, prefault_ahead_bytes=0) as store:
        batch = [make_msg(body=os.urandom(4000), uniq=f"B{i}") for i in range(8)]
        r = await store.put_messages(batch)
        assert r.status == PutMessageStatus.PUT_OK
        small = await store.put_message(make_msg(body=b"tiny"))  # under a page: copied into the mapping
        assert small.status == PutMessageStatus.PUT_OK
        assert calls == [r.append_result.wrote_bytes]
        got = store.get_message("g", "T", 0, 0, 32)
        assert got.message_count == 9
        decoded = [decode_record(b, check_crc=True) for b in got.buffers]
        assert [d.body for d in decoded] == [m.body for m in batch] + [b"tiny"]


async def test_populated_pages_are_copied_into_the_mapping(tmp_path, monkeypatch):
    calls = _count_pwrites(monkeypatch)
    async with _store(tmp_path, mapped_file_size_commit_log=1024 * 1024, preallocate_mapped_file=True) as store:
        r = await store.put_messages([make_msg(body=os.urandom(4000)) for _ in range(8)])
        assert r.status == PutMessageStatus.PUT_OK
        assert calls == []


async def test_a_failed_pwrite_publishes_nothing(tmp_path, monkeypatch):
    async with _store(tmp_path, mapped_file_size_commit_log=1024 * 1024, prefault_ahead_bytes=0) as store:
        first = await store.put_message(make_msg(body=b"before"))
        assert first.status == PutMessageStatus.PUT_OK
        end = store.commit_log.get_max_offset()

        def full(self, data, pos):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(MappedFile, "write_at", full)
        r = await store.put_messages([make_msg(body=os.urandom(3000), uniq=f"F{i}") for i in range(4)])
        assert r.status == PutMessageStatus.UNKNOWN_ERROR
        assert "write to the CommitLog failed" in r.remark and "No space left" in r.remark
        assert store.commit_log.get_max_offset() == end
        assert store.get_max_offset_in_queue("T", 0) == 1
        monkeypatch.undo()
        again = await store.put_messages([make_msg(body=os.urandom(3000)) for _ in range(4)])
        assert again.status == PutMessageStatus.PUT_OK
        assert again.append_result.wrote_offset == end
        assert again.append_result.logics_offset == 1
        got = store.get_message("g", "T", 0, 0, 32)
        assert got.message_count == 5
        assert all(decode_record(b, check_crc=True) for b in got.buffers)


async def test_a_batch_is_dispatched_to_its_queue_and_the_index(tmp_path):
    async with _store(tmp_path, mapped_file_size_commit_log=1024 * 1024) as store:
        await store.put_message(make_msg(topic="B", queue_id=2, tags="first"))  # the queue's first entry
        batch = [make_msg(topic="B", queue_id=2, tags=f"t{i % 2}", uniq=f"UQ{i}") for i in range(10)]
        r = await store.put_messages(batch)
        assert r.status == PutMessageStatus.PUT_OK
        assert store.get_max_offset_in_queue("B", 2) == 11
        cq = store.consume_queue_table["B"][2]
        got = store.get_message("g", "B", 2, 1, 32)
        decoded = [decode_record(b) for b in got.buffers]
        assert [d.properties["UNIQ_KEY"] for d in decoded] == [f"UQ{i}" for i in range(10)]
        assert [d.queue_offset for d in decoded] == list(range(1, 11))
        # the consume queue entries: CommitLog offset, size and the tags hash of each record
        mf = cq.mapped_file_queue.mapped_files[0]
        raw = bytes(mf.view[CQ_STORE_UNIT_SIZE : 11 * CQ_STORE_UNIT_SIZE])
        for i, d in enumerate(decoded):
            e = raw[i * CQ_STORE_UNIT_SIZE : (i + 1) * CQ_STORE_UNIT_SIZE]
            assert int.from_bytes(e[:8], "big") == d.commit_log_offset
            assert int.from_bytes(e[8:12], "big") == d.store_size
            assert int.from_bytes(e[12:], "big", signed=True) == tags_hash(f"t{i % 2}")
        # every key is found at once (the index build is deferred, a query builds what waits)
        for i in (0, 9):
            q = store.query_message("B", f"UQ{i}", 32, 0, 2**62)
            assert q.message_count == 1
            assert decode_record(q.buffers[0]).properties["UNIQ_KEY"] == f"UQ{i}"


async def test_a_batch_across_a_consume_queue_file_boundary(tmp_path):
    # 100 entries per consume queue file: a batch of 30 from offset 90 crosses into the second file
    async with _store(tmp_path, mapped_file_size_commit_log=1024 * 1024) as store:
        for _ in range(3):
            r = await store.put_messages([make_msg(body=b"a" * 20) for _ in range(30)])
            assert r.status == PutMessageStatus.PUT_OK
        r = await store.put_messages([make_msg(body=b"b" * 20, uniq=f"X{i}") for i in range(30)])
        assert r.status == PutMessageStatus.PUT_OK
        assert store.get_max_offset_in_queue("T", 0) == 120
        decoded = []
        offset = 85
        while offset < 120:  # a pull stops at the end of a consume queue file, as upstream's
            got = store.get_message("g", "T", 0, offset, 32)
            assert got.message_count > 0
            decoded += [decode_record(b) for b in got.buffers]
            offset = got.next_begin_offset
        assert [d.queue_offset for d in decoded] == list(range(85, 120))
        assert [d.body for d in decoded] == [b"a" * 20] * 5 + [b"b" * 20] * 30
        assert store.query_message("T", "X29", 32, 0, 2**62).message_count == 1
    # and after a restart, everything is where it was
    async with _store(tmp_path, mapped_file_size_commit_log=1024 * 1024) as store:
        assert store.get_max_offset_in_queue("T", 0) == 120
        got = store.get_message("g", "T", 0, 110, 32)
        assert [decode_record(b).properties["UNIQ_KEY"] for b in got.buffers] == [f"X{i}" for i in range(20, 30)]
